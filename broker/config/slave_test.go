package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSlaveKeys(t *testing.T) {
	cases := []struct {
		name string
		text string
		want Slave
	}{
		{"minimal", "slaveId=0\n", Slave{SlaveID: 0, SlaveGroup: "meta-slave-group_0", SlaveMaxDelay: 500 * time.Millisecond, Compression: "zstd"}},
		{"blank group takes the default", "slaveId=3\nslaveGroup=\n", Slave{SlaveID: 3, SlaveGroup: "meta-slave-group_3", SlaveMaxDelay: 500 * time.Millisecond, Compression: "zstd"}},
		{"every key", strings.Join([]string{
			"slaveId=2", "slaveGroup=g", "slaveMaxDelayInMills=250", "autoSyncMasterConfig=true",
			"masterAddress=127.0.0.1:8124", "compression=s2", "bandwidthBytesPerSec=1024*1024",
			"tlsCert=/c.pem", "tlsKey=/k.pem", "tlsCA=/ca.pem"}, "\n"),
			Slave{SlaveID: 2, SlaveGroup: "g", SlaveMaxDelay: 250 * time.Millisecond, AutoSyncMasterConfig: true,
				MasterAddress: "127.0.0.1:8124", Compression: "s2", BandwidthBytesPerSec: 1 << 20,
				TLSCert: "/c.pem", TLSKey: "/k.pem", TLSCA: "/ca.pem"}},
		{"properties syntax", "# comment\n! also a comment\n  slaveId : 4\r\nslaveGroup  my\\\n    group\nslaveMaxDelayInMills=1\\u0030\n\ncompression = none \t\nautoSyncMasterConfig=FALSE\n",
			Slave{SlaveID: 4, SlaveGroup: "mygroup", SlaveMaxDelay: 10 * time.Millisecond, Compression: "none"}},
		{"escaped key characters", "slave\\Id=5\n", Slave{SlaveID: 5, SlaveGroup: "meta-slave-group_5", SlaveMaxDelay: 500 * time.Millisecond, Compression: "zstd"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sl, w, err := ParseSlave("async_slave.properties", []byte(c.text))
			if err != nil || len(w) != 0 {
				t.Fatalf("err %v, warnings %v", err, w)
			}
			c.want.File = "async_slave.properties"
			if !reflect.DeepEqual(*sl, c.want) {
				t.Errorf("got  %+v\nwant %+v", *sl, c.want)
			}
		})
	}
}

func TestSlaveErrors(t *testing.T) {
	cases := []struct {
		name, text, key, value, expected string
	}{
		{"slaveId missing", "slaveGroup=g\n", "slaveId", "", "required"},
		{"slaveId blank", "slaveId=\n", "slaveId", "", "required"},
		{"slaveId negative", "slaveId=-1\n", "slaveId", "-1", ">= 0"},
		{"slaveId word", "slaveId=one\n", "slaveId", "one", ">= 0"},
		{"slaveMaxDelayInMills bad", "slaveId=0\nslaveMaxDelayInMills=fast\n", "slaveMaxDelayInMills", "fast", "milliseconds"},
		{"slaveMaxDelayInMills negative", "slaveId=0\nslaveMaxDelayInMills=-1\n", "slaveMaxDelayInMills", "-1", "milliseconds"},
		{"autoSyncMasterConfig bad", "slaveId=0\nautoSyncMasterConfig=yes\n", "autoSyncMasterConfig", "yes", "true or false"},
		{"masterAddress bad", "slaveId=0\nmasterAddress=somewhere\n", "masterAddress", "somewhere", "host:port"},
		{"compression bad", "slaveId=0\ncompression=lz4\n", "compression", "lz4", "zstd, s2, none, auto"},
		{"bandwidth bad", "slaveId=0\nbandwidthBytesPerSec=-5\n", "bandwidthBytesPerSec", "-5", "0.."},
		{"tlsKey without cert", "slaveId=0\ntlsKey=/k.pem\n", "tlsKey", "/k.pem", "together"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sl, _, err := ParseSlave("s.properties", []byte(c.text))
			if err == nil {
				t.Fatalf("accepted: %+v", sl)
			}
			l := errorList(t, err)
			e := l[0]
			if e.File != "s.properties" || e.Key != c.key || e.Value != c.value || !strings.Contains(e.Expected, c.expected) {
				t.Errorf("got %+v", *e)
			}
			if !strings.Contains(e.Error(), "s.properties") || !strings.Contains(e.Error(), c.key) {
				t.Errorf("message %q", e.Error())
			}
		})
	}
}

func TestSlaveWarnings(t *testing.T) {
	_, w, err := ParseSlave("s.properties", []byte("slaveId=0\nslaveGrop=x\nslaveId=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := findWarning(w, "", "slaveGrop"); !ok || !strings.Contains(got.Message, `"slaveGroup"`) {
		t.Errorf("unknown key warning: %v", w)
	}
	if _, ok := findWarning(w, "", "slaveId"); !ok {
		t.Errorf("repeated key warning: %v", w)
	}
}
