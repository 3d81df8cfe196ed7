package topology

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		m    Meta
	}{
		{"master with lag", Meta{
			Site: "bj", Role: RoleMaster, BrokerID: 1, SlaveID: -1,
			ServeURL: "meta://127.0.0.1:8123", ReplAddr: "127.0.0.1:8124", HTTPAddr: "127.0.0.1:8120",
			Health: Health{StorageOK: true, ReplicationOK: true},
			Lag: []LagSummary{
				{SlaveGroup: "meta-slave-group_0", SlaveID: 0, Partitions: 8, Bytes: 1 << 40, Messages: 123456789, Behind: 1500 * time.Millisecond, State: LagLagging},
				{SlaveGroup: "hf", SlaveID: 1, Partitions: 8, State: LagDown},
			},
		}},
		{"with ensemble and views", Meta{
			Site: "hf", Role: RoleSlave, BrokerID: 2, SlaveID: 1, ServeURL: "meta://127.0.0.1:9123",
			Health:    Health{StorageOK: true, ReplicationOK: true},
			ZKConnect: "zk-1.hf.example.net:2181,zk-2.hf.example.net:2181", ZKRoot: "/meta", Views: []string{"bj", "hf"},
		}},
		{"promoted master with a generation", Meta{
			Site: "hf", Role: RoleMaster, BrokerID: 1, SlaveID: -1, ServeURL: "meta://127.0.0.1:9123",
			ReplAddr: "127.0.0.1:9124", Health: Health{StorageOK: true, ReplicationOK: true}, Generation: 3,
		}},
		{"generation with ensemble", Meta{
			Site: "gz", Role: RoleSlave, BrokerID: 1, SlaveID: 2, ServeURL: "meta://127.0.0.1:7123",
			ZKConnect: "127.0.0.1:2181", ZKRoot: "/meta", Generation: 1 << 40,
		}},
		{"slave with a log position", Meta{
			Site: "gz", Role: RoleSlave, BrokerID: 1, SlaveID: 2, ServeURL: "meta://127.0.0.1:7123", LogPos: 123456789,
		}},
		{"slave unhealthy", Meta{
			Site: "hf", Role: RoleSlave, BrokerID: 1023, SlaveID: 7,
			ServeURL: "meta://127.0.0.1:9123", Health: Health{StorageOK: false, ReplicationOK: true},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := EncodeMeta(c.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeMeta(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.m) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, c.m)
			}
		})
	}
}

// TestMetaSizeLimit checks the encoding against memberlist's 512-byte limit
// with the longest identity we accept and far more slave groups than fit.
func TestMetaSizeLimit(t *testing.T) {
	long := strings.Repeat("x", maxMetaString)
	m := Meta{Site: long, ServeURL: long, ReplAddr: long, HTTPAddr: long, BrokerID: 1023, SlaveID: -1,
		Health: Health{StorageOK: true, ReplicationOK: true}}
	for i := range 100 {
		m.Lag = append(m.Lag, LagSummary{SlaveGroup: strings.Repeat("g", 40), SlaveID: i, Partitions: 10000,
			Bytes: 1 << 50, Messages: 1 << 40, Behind: 1000 * time.Hour, State: LagStuck})
	}
	b, err := EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MetaMaxSize {
		t.Fatalf("encoded %d bytes, limit %d", len(b), MetaMaxSize)
	}
	got, err := DecodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.LagTruncated || len(got.Lag) == 0 || len(got.Lag) >= len(m.Lag) {
		t.Fatalf("want a truncated, non-empty lag list, got %d entries truncated=%v", len(got.Lag), got.LagTruncated)
	}
	if !reflect.DeepEqual(got.Lag, m.Lag[:len(got.Lag)]) {
		t.Fatal("kept lag entries differ from the first ones given")
	}

	// A typical master with ten slave groups fits whole.
	m = Meta{Site: "bj", ServeURL: "meta://127.0.0.1:8123", ReplAddr: "127.0.0.1:8124", HTTPAddr: "127.0.0.1:8120", SlaveID: -1}
	for i := range 10 {
		m.Lag = append(m.Lag, LagSummary{SlaveGroup: "meta-slave-group_" + string(rune('0'+i)), SlaveID: i, Partitions: 64,
			Bytes: 1 << 35, Messages: 1 << 30, Behind: time.Hour, State: LagLagging})
	}
	b, err = EncodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := DecodeMeta(b); got.LagTruncated || len(got.Lag) != 10 {
		t.Fatalf("ten groups: truncated=%v entries=%d size=%d", got.LagTruncated, len(got.Lag), len(b))
	}
	t.Logf("ten slave groups encode to %d bytes", len(b))

	// Too long a field is refused, not cut.
	if _, err := EncodeMeta(Meta{Site: long + "y"}); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("long site: err = %v", err)
	}
}

func TestDecodeMetaCorrupt(t *testing.T) {
	good, _ := EncodeMeta(Meta{Site: "bj", ServeURL: "meta://127.0.0.1:1", Lag: []LagSummary{{SlaveGroup: "g"}}})
	for i := 0; i < len(good); i++ {
		if _, err := DecodeMeta(good[:i]); err == nil {
			t.Fatalf("truncated to %d bytes: no error", i)
		}
	}
	if _, err := DecodeMeta(append([]byte{9}, good[1:]...)); err == nil {
		t.Fatal("unknown version accepted")
	}
}
