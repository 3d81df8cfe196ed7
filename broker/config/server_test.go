package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	s, w := mustParse(t, minimalDoc())
	if len(w) != 0 {
		t.Fatalf("warnings on a minimal file: %v", w)
	}
	home, _ := os.UserHomeDir()
	cpus := runtime.NumCPU()
	checks := []struct {
		name string
		got  any
		want any
	}{
		{"hostName", s.System.HostName, ""},
		{"serverPort", s.System.ServerPort, 8123},
		{"dashboardHttpPort", s.System.DashboardHTTPPort, 8120},
		{"dataPath", s.System.DataPath, filepath.Join(home, "meta")},
		{"dataLogPath", s.System.DataLogPath, filepath.Join(home, "meta")},
		{"appClassPath", s.System.AppClassPath, ""},
		{"getProcessThreadCount", s.System.GetProcessThreadCount, 10 * cpus},
		{"putProcessThreadCount", s.System.PutProcessThreadCount, 10 * cpus},
		{"deletePolicy", s.System.DeletePolicy.Text, "delete,168"},
		{"deletePolicy age", s.System.DeletePolicy.MaxAge, 168 * time.Hour},
		{"deleteWhen", s.System.DeleteWhen.Text, "0 0 6,18 * * ?"},
		{"quartzThreadCount", s.System.QuartzThreadCount, 5},
		{"maxCheckpoints", s.System.MaxCheckpoints, 3},
		{"checkpointInterval", s.System.CheckpointInterval, time.Hour},
		{"maxTxTimeoutTimerCapacity", s.System.MaxTxTimeoutTimerCapacity, 30000},
		{"flushTxLogAtCommit", s.System.FlushTxLogAtCommit, 1},
		{"maxTxTimeoutInSeconds", s.System.MaxTxTimeoutInSeconds, 60},
		{"acceptPublish", s.System.AcceptPublish, true},
		{"acceptSubscribe", s.System.AcceptSubscribe, true},
		{"stat", s.System.Stat, false},
		{"updateConsumerOffsets", s.System.UpdateConsumerOffsets, false},
		{"loadMessageStoresInParallel", s.System.LoadMessageStoresInParallel, false},
		{"zk.zkSessionTimeoutMs", s.ZooKeeper.SessionTimeout, 30 * time.Second},
		{"zk.zkConnectionTimeoutMs", s.ZooKeeper.ConnectionTimeout, 30 * time.Second},
		{"zk.zkSyncTimeMs", s.ZooKeeper.SyncTime, 5 * time.Second},
		{"zk.zkEnable", s.ZooKeeper.Enable, true},
		{"zk.zkRoot", s.ZooKeeper.Root, "/meta"},
		{"site.name", s.Site.Name, "default"},
		{"site.dashboardAddr", s.Site.DashboardAddr, "127.0.0.1:8120"},
		{"site.adminAddr", s.Site.AdminAddr, ""}, // the unix socket <dataPath>/admin.sock
		{"site.token", s.Site.Token, ""},
		{"gossip.enable", s.Gossip.Enable, false},
		{"gossip.bind", s.Gossip.Bind, "127.0.0.1:8126"},
		{"gossip.probeIntervalMs", s.Gossip.ProbeInterval, time.Second},
		{"nats.url", s.NATS.URL, ""},
		{"nats.embeddedListen", s.NATS.EmbeddedListen, "127.0.0.1:8127"},
		{"nats.bucket", s.NATS.Bucket, "metaq_config"},
		{"nats.subject", s.NATS.Subject, "metaq.config"},
		{"replication.listen", s.Replication.Listen, ""}, // the MetaQ port
		{"replication.compression", s.Replication.Compression, "zstd"},
		{"replication.bandwidthBytesPerSec", s.Replication.BandwidthBytesPerSec, int64(0)},
		{"replication.stuckAfterMs", s.Replication.StuckAfter, 30 * time.Second},
		{"limits.maxConnections", s.Limits.MaxConnections, 10000},
		{"limits.maxConnectionsPerAddress", s.Limits.MaxConnectionsPerAddress, 1000},
		{"limits.idleTimeoutMs", s.Limits.IdleTimeout, 10 * time.Minute},
		{"limits.readTimeoutMs", s.Limits.ReadTimeout, time.Minute},
		{"limits.writeTimeoutMs", s.Limits.WriteTimeout, 30 * time.Second},
		{"limits.maxBufferedBytes", s.Limits.MaxBufferedBytes, int64(256 << 20)},
		{"limits.maxConnectionBufferedBytes", s.Limits.MaxConnectionBufferedBytes, int64(32 << 20)},
		{"limits.getWaitMs", s.Limits.GetWait, time.Duration(0)},
		{"limits.getWaitMinBytes", s.Limits.GetWaitMinBytes, int64(256 << 10)},
		{"limits.getWaitLingerMs", s.Limits.GetWaitLinger, 5 * time.Millisecond},
		{"limits.tcpCongestion", s.Limits.TCPCongestion, "cubic"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
	// The topic inherits every [system] value it does not set.
	tp := s.Topics[0]
	if tp.Name != "test" || tp.NumPartitions != 1 || tp.UnflushThreshold != 0 || tp.UnflushInterval != 10*time.Second ||
		tp.DataPath != s.System.DataPath || tp.DeletePolicy != s.System.DeletePolicy || tp.DeleteWhen.Text != "0 0 6,18 * * ?" ||
		!tp.AcceptPublish || !tp.AcceptSubscribe || tp.Stat || len(tp.Filters) != 0 {
		t.Errorf("topic defaults: %+v", tp)
	}
}

// TestKeys sets each key to a non-default value and checks where it lands.
func TestKeys(t *testing.T) {
	cases := []struct {
		section, key, value string
		get                 func(*Server) any
		want                any
	}{
		{"system", "brokerId", "1023", func(s *Server) any { return s.System.BrokerID }, 1023},
		{"system", "brokerId", "7", func(s *Server) any { return s.System.BrokerID }, 7},
		{"system", "hostName", "127.0.0.2", func(s *Server) any { return s.System.HostName }, "127.0.0.2"},
		{"system", "serverPort", "9123", func(s *Server) any { return s.System.ServerPort }, 9123},
		{"system", "dashboardHttpPort", "9120", func(s *Server) any { return s.System.DashboardHTTPPort }, 9120},
		{"system", "dataPath", "/srv/meta", func(s *Server) any { return s.System.DataPath + "|" + s.System.DataLogPath }, "/srv/meta|/srv/meta"},
		{"system", "dataLogPath", "/srv/txlog", func(s *Server) any { return s.System.DataLogPath }, "/srv/txlog"},
		{"system", "appClassPath", "/srv/provided/", func(s *Server) any { return s.System.AppClassPath }, "/srv/provided/"},
		{"system", "numPartitions", "8", func(s *Server) any { return s.System.NumPartitions }, 8},
		{"system", "unflushThreshold", "-1", func(s *Server) any { return s.System.UnflushThreshold }, -1},
		{"system", "unflushThreshold", "1000", func(s *Server) any { return s.System.UnflushThreshold }, 1000},
		{"system", "unflushInterval", "250", func(s *Server) any { return s.System.UnflushInterval }, 250 * time.Millisecond},
		{"system", "maxSegmentSize", "1024*1024*1024", func(s *Server) any { return s.System.MaxSegmentSize }, int64(1 << 30)},
		{"system", "maxSegmentSize", "64 * (1024 + 0)", func(s *Server) any { return s.System.MaxSegmentSize }, int64(65536)},
		{"system", "maxTransferSize", "512*1024", func(s *Server) any { return s.System.MaxTransferSize }, 512 * 1024},
		{"system", "getProcessThreadCount", "3", func(s *Server) any { return s.System.GetProcessThreadCount }, 3},
		{"system", "putProcessThreadCount", "4", func(s *Server) any { return s.System.PutProcessThreadCount }, 4},
		{"system", "deletePolicy", "archive,10m,true", func(s *Server) any { return s.System.DeletePolicy },
			DeletePolicy{Name: "archive", MaxAge: 10 * time.Minute, Compress: true, Text: "archive,10m,true"}},
		{"system", "deleteWhen", "0 15 2 ? * MON-FRI", func(s *Server) any { return s.System.DeleteWhen.Text }, "0 15 2 ? * MON-FRI"},
		{"system", "quartzThreadCount", "2", func(s *Server) any { return s.System.QuartzThreadCount }, 2},
		{"system", "maxCheckpoints", "9", func(s *Server) any { return s.System.MaxCheckpoints }, 9},
		{"system", "checkpointInterval", "60*1000", func(s *Server) any { return s.System.CheckpointInterval }, time.Minute},
		{"system", "maxTxTimeoutTimerCapacity", "100", func(s *Server) any { return s.System.MaxTxTimeoutTimerCapacity }, 100},
		{"system", "flushTxLogAtCommit", "0", func(s *Server) any { return s.System.FlushTxLogAtCommit }, 0},
		{"system", "flushTxLogAtCommit", "2", func(s *Server) any { return s.System.FlushTxLogAtCommit }, 2},
		{"system", "maxTxTimeoutInSeconds", "30", func(s *Server) any { return s.System.MaxTxTimeoutInSeconds }, 30},
		{"system", "acceptPublish", "false", func(s *Server) any { return s.System.AcceptPublish }, false},
		{"system", "acceptSubscribe", "false", func(s *Server) any { return s.System.AcceptSubscribe }, false},
		{"system", "stat", "true", func(s *Server) any { return s.System.Stat }, true},
		{"system", "updateConsumerOffsets", "TRUE", func(s *Server) any { return s.System.UpdateConsumerOffsets }, true},
		{"system", "loadMessageStoresInParallel", "true", func(s *Server) any { return s.System.LoadMessageStoresInParallel }, true},
		{"zookeeper", "zk.zkConnect", "127.0.0.1:2181,127.0.0.1:2182", func(s *Server) any { return s.ZooKeeper.Connect }, "127.0.0.1:2181,127.0.0.1:2182"},
		{"zookeeper", "zk.zkSessionTimeoutMs", "6000", func(s *Server) any { return s.ZooKeeper.SessionTimeout }, 6 * time.Second},
		{"zookeeper", "zk.zkConnectionTimeoutMs", "7000", func(s *Server) any { return s.ZooKeeper.ConnectionTimeout }, 7 * time.Second},
		{"zookeeper", "zk.zkSyncTimeMs", "100", func(s *Server) any { return s.ZooKeeper.SyncTime }, 100 * time.Millisecond},
		{"zookeeper", "zk.zkEnable", "false", func(s *Server) any { return s.ZooKeeper.Enable }, false},
		{"zookeeper", "zk.zkRoot", "/metaq-test-1", func(s *Server) any { return s.ZooKeeper.Root }, "/metaq-test-1"},
		{"zookeeper", "zk.zkRoot", "a/b/", func(s *Server) any { return s.ZooKeeper.Root }, "/a/b"},
		{"topic=test", "numPartitions", "16", func(s *Server) any { return s.Topics[0].NumPartitions }, 16},
		{"topic=test", "unflushThreshold", "10", func(s *Server) any { return s.Topics[0].UnflushThreshold }, 10},
		{"topic=test", "unflushInterval", "20", func(s *Server) any { return s.Topics[0].UnflushInterval }, 20 * time.Millisecond},
		{"topic=test", "dataPath", "/srv/test", func(s *Server) any { return s.Topics[0].DataPath }, "/srv/test"},
		{"topic=test", "deletePolicy", "delete,30s", func(s *Server) any { return s.Topics[0].DeletePolicy.MaxAge }, 30 * time.Second},
		{"topic=test", "deleteWhen", "0 0 * * * ?", func(s *Server) any { return s.Topics[0].DeleteWhen.Text }, "0 0 * * * ?"},
		{"topic=test", "acceptPublish", "false", func(s *Server) any { return s.Topics[0].AcceptPublish }, false},
		{"topic=test", "acceptSubscribe", "false", func(s *Server) any { return s.Topics[0].AcceptSubscribe }, false},
		{"topic=test", "stat", "true", func(s *Server) any { return s.Topics[0].Stat }, true},
		{"topic=test", "group.g1", "com.example.F", func(s *Server) any { return s.Topics[0].Filters }, map[string]string{"g1": "com.example.F"}},
		{"topic=test", "group.g2", "", func(s *Server) any { return s.Topics[0].Filters }, map[string]string{}},
		{"site", "name", "bj", func(s *Server) any { return s.Site.Name }, "bj"},
		{"site", "dashboardAddr", "127.0.0.1:0", func(s *Server) any { return s.Site.DashboardAddr }, "127.0.0.1:0"},
		{"site", "adminAddr", "localhost:9999", func(s *Server) any { return s.Site.AdminAddr }, "localhost:9999"},
		{"site", "token", "s3cret", func(s *Server) any { return s.Site.Token }, "s3cret"},
		{"site", "overlay", "site.ini", func(s *Server) any { return s.Site.Overlay }, "site.ini"},
		{"gossip", "enable", "false", func(s *Server) any { return s.Gossip.Enable }, false},
		{"gossip", "bind", "127.0.0.1:7946", func(s *Server) any { return s.Gossip.Bind + "|" + fmt.Sprint(s.Gossip.Enable) }, "127.0.0.1:7946|true"},
		{"gossip", "advertise", "127.0.0.1:7000", func(s *Server) any { return s.Gossip.Advertise }, "127.0.0.1:7000"},
		{"gossip", "join", "127.0.0.1:1, 127.0.0.1:2", func(s *Server) any { return s.Gossip.Join }, []string{"127.0.0.1:1", "127.0.0.1:2"}},
		{"gossip", "key", "AAECAwQFBgcICQoLDA0ODw==", func(s *Server) any { return len(s.Gossip.Key) }, 16},
		{"gossip", "label", "metaq-test", func(s *Server) any { return s.Gossip.Label }, "metaq-test"},
		{"gossip", "probeIntervalMs", "200", func(s *Server) any { return s.Gossip.ProbeInterval }, 200 * time.Millisecond},
		{"nats", "url", "nats://127.0.0.1:4222", func(s *Server) any { return s.NATS.URL }, "nats://127.0.0.1:4222"},
		{"nats", "embeddedListen", "127.0.0.1:0", func(s *Server) any { return s.NATS.EmbeddedListen }, "127.0.0.1:0"},
		{"nats", "credsFile", "/etc/n.creds", func(s *Server) any { return s.NATS.CredsFile }, "/etc/n.creds"},
		{"nats", "tlsCA", "/etc/ca.pem", func(s *Server) any { return s.NATS.TLSCA }, "/etc/ca.pem"},
		{"nats", "bucket", "b", func(s *Server) any { return s.NATS.Bucket }, "b"},
		{"nats", "subject", "s.x", func(s *Server) any { return s.NATS.Subject }, "s.x"},
		{"replication", "listen", "127.0.0.1:0", func(s *Server) any { return s.Replication.Listen }, "127.0.0.1:0"},
		{"replication", "advertise", "relay.example:9124", func(s *Server) any { return s.Replication.Advertise }, "relay.example:9124"},
		{"replication", "compression", "s2", func(s *Server) any { return s.Replication.Compression }, "s2"},
		{"replication", "compression", "none", func(s *Server) any { return s.Replication.Compression }, "none"},
		{"replication", "compression", "auto", func(s *Server) any { return s.Replication.Compression }, "auto"},
		{"replication", "bandwidthBytesPerSec", "50*1000*1000/8", func(s *Server) any { return s.Replication.BandwidthBytesPerSec }, int64(6250000)},
		{"replication", "stuckAfterMs", "1500", func(s *Server) any { return s.Replication.StuckAfter }, 1500 * time.Millisecond},
		{"limits", "maxConnections", "0", func(s *Server) any { return s.Limits.MaxConnections }, 0},
		{"limits", "maxConnections", "500", func(s *Server) any { return s.Limits.MaxConnections }, 500},
		{"limits", "maxConnectionsPerAddress", "20", func(s *Server) any { return s.Limits.MaxConnectionsPerAddress }, 20},
		{"limits", "idleTimeoutMs", "60000", func(s *Server) any { return s.Limits.IdleTimeout }, time.Minute},
		{"limits", "idleTimeoutMs", "0", func(s *Server) any { return s.Limits.IdleTimeout }, time.Duration(0)},
		{"limits", "readTimeoutMs", "5000", func(s *Server) any { return s.Limits.ReadTimeout }, 5 * time.Second},
		{"limits", "writeTimeoutMs", "1000", func(s *Server) any { return s.Limits.WriteTimeout }, time.Second},
		{"limits", "getWaitMs", "250", func(s *Server) any { return s.Limits.GetWait }, 250 * time.Millisecond},
		{"limits", "getWaitMinBytes", "0", func(s *Server) any { return s.Limits.GetWaitMinBytes }, int64(0)},
		{"limits", "getWaitMinBytes", "65536", func(s *Server) any { return s.Limits.GetWaitMinBytes }, int64(65536)},
		{"limits", "getWaitLingerMs", "20", func(s *Server) any { return s.Limits.GetWaitLinger }, 20 * time.Millisecond},
		{"limits", "tcpCongestion", "host", func(s *Server) any { return s.Limits.TCPCongestion }, ""},
		{"limits", "tcpCongestion", "bbr", func(s *Server) any { return s.Limits.TCPCongestion }, "bbr"},
		{"limits", "maxBufferedBytes", "1024*1024*1024", func(s *Server) any { return s.Limits.MaxBufferedBytes }, int64(1 << 30)},
		{"limits", "maxConnectionBufferedBytes", "64*1024*1024",
			func(s *Server) any { return [2]int64{s.Limits.MaxConnectionBufferedBytes, s.Limits.MaxBufferedBytes} }, [2]int64{64 << 20, 256 << 20}},
	}
	for _, c := range cases {
		t.Run(c.section+"/"+c.key+"="+c.value, func(t *testing.T) {
			s, w := mustParse(t, minimalDoc().set(c.section, c.key, c.value))
			if len(w) != 0 {
				t.Errorf("unexpected warnings: %v", w)
			}
			if got := c.get(s); !reflect.DeepEqual(got, c.want) {
				t.Errorf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func TestTopicInheritsSystem(t *testing.T) {
	d := minimalDoc().
		set("system", "numPartitions", "3").set("system", "unflushThreshold", "5").set("system", "unflushInterval", "77").
		set("system", "dataPath", "/srv/d").set("system", "deletePolicy", "delete,2h").set("system", "deleteWhen", "0 0 1 * * ?").
		set("system", "acceptPublish", "false").set("system", "acceptSubscribe", "false").set("system", "stat", "true")
	s, _ := mustParse(t, d)
	tp := s.Topics[0]
	if tp.NumPartitions != 3 || tp.UnflushThreshold != 5 || tp.UnflushInterval != 77*time.Millisecond || tp.DataPath != "/srv/d" ||
		tp.DeletePolicy.MaxAge != 2*time.Hour || tp.DeleteWhen.Text != "0 0 1 * * ?" || tp.AcceptPublish || tp.AcceptSubscribe || !tp.Stat {
		t.Errorf("topic did not inherit [system]: %+v", tp)
	}
}

func TestDerivedPorts(t *testing.T) {
	t.Run("serverPort+k", func(t *testing.T) {
		s, _ := mustParse(t, minimalDoc().set("system", "serverPort", "9000").set("system", "dashboardHttpPort", "9100"))
		got := []string{s.Replication.Listen, s.Site.AdminAddr, s.Gossip.Bind, s.NATS.EmbeddedListen, s.Site.DashboardAddr}
		want := []string{"", "", "127.0.0.1:9003", "127.0.0.1:9004", "127.0.0.1:9100"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	t.Run("serverPort=0 gives free ports", func(t *testing.T) {
		s, _ := mustParse(t, minimalDoc().set("system", "serverPort", "0"))
		got := []string{s.Replication.Listen, s.Site.AdminAddr, s.Gossip.Bind, s.NATS.EmbeddedListen}
		want := []string{"", "", "127.0.0.1:0", "127.0.0.1:0"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	t.Run("replication shares the MetaQ port unless listen is set", func(t *testing.T) {
		for _, host := range []string{"127.0.0.5", "mq1.example.net"} {
			s, _ := mustParse(t, minimalDoc().set("system", "hostName", host))
			if s.Replication.Listen != "" || s.Replication.ListenSet {
				t.Errorf("hostName %s: listen %q (set %v), want the MetaQ port", host, s.Replication.Listen, s.Replication.ListenSet)
			}
		}
	})
	t.Run("without [gossip] and [nats] any serverPort takes no other port", func(t *testing.T) {
		s, _ := mustParse(t, minimalDoc().set("system", "serverPort", "65535"))
		if s.Site.AdminAddr != "" || s.Gossip.Enable || s.NATS.Enabled {
			t.Errorf("admin %q, gossip %v, NATS %v: a file with no [site], [gossip] or [nats] must take no port but serverPort",
				s.Site.AdminAddr, s.Gossip.Enable, s.NATS.Enabled)
		}
		if got := s.System.AdminSocket(); got != filepath.Join(s.System.DataPath, "admin.sock") {
			t.Errorf("admin socket %q", got)
		}
	})
	t.Run("high serverPort needs no replication address", func(t *testing.T) {
		mustParse(t, minimalDoc().set("system", "serverPort", "65535").set("site", "adminAddr", "127.0.0.1:1").
			set("gossip", "bind", "127.0.0.1:2").set("nats", "embeddedListen", "127.0.0.1:3"))
	})
	t.Run("high serverPort with explicit addresses", func(t *testing.T) {
		mustParse(t, minimalDoc().set("system", "serverPort", "65535").set("site", "adminAddr", "127.0.0.1:1").
			set("gossip", "bind", "127.0.0.1:2").set("nats", "embeddedListen", "127.0.0.1:3").set("replication", "listen", "127.0.0.1:4"))
	})
}

// TestErrors checks every refusal: the error names file, section, key, the
// value and what was expected.
func TestErrors(t *testing.T) {
	base := minimalDoc()
	cases := []struct {
		name     string
		d        doc
		section  string
		key      string
		value    string
		expected string // substring of Expected
	}{
		{"brokerId not a number", base.set("system", "brokerId", "abc"), "system", "brokerId", "abc", "integer"},
		{"brokerId negative", base.set("system", "brokerId", "-1"), "system", "brokerId", "-1", "0..1023"},
		{"brokerId 1024", base.set("system", "brokerId", "1024"), "system", "brokerId", "1024", "0..1023"},
		{"brokerId decimal", base.set("system", "brokerId", "1.5"), "system", "brokerId", "1.5", "integer"},
		{"brokerId missing", base.del("system", "brokerId"), "system", "brokerId", "", "required"},
		{"numPartitions missing", base.del("system", "numPartitions"), "system", "numPartitions", "", "required"},
		{"numPartitions blank", base.set("system", "numPartitions", ""), "system", "numPartitions", "", "required"},
		{"numPartitions zero", base.set("system", "numPartitions", "0"), "system", "numPartitions", "0", "1.."},
		{"unflushThreshold missing", base.del("system", "unflushThreshold"), "system", "unflushThreshold", "", "required"},
		{"unflushThreshold word", base.set("system", "unflushThreshold", "many"), "system", "unflushThreshold", "many", "integer"},
		{"unflushInterval missing", base.del("system", "unflushInterval"), "system", "unflushInterval", "", "required"},
		{"unflushInterval negative", base.set("system", "unflushInterval", "-5"), "system", "unflushInterval", "-5", "0.."},
		{"maxSegmentSize missing", base.del("system", "maxSegmentSize"), "system", "maxSegmentSize", "", "required"},
		{"maxSegmentSize over int", base.set("system", "maxSegmentSize", "2*1024*1024*1024"), "system", "maxSegmentSize", "2*1024*1024*1024", "32-bit"},
		{"maxSegmentSize 10G suffix", base.set("system", "maxSegmentSize", "10G"), "system", "maxSegmentSize", "10G", "integer"},
		{"maxTransferSize missing", base.del("system", "maxTransferSize"), "system", "maxTransferSize", "", "required"},
		{"maxTransferSize zero", base.set("system", "maxTransferSize", "0"), "system", "maxTransferSize", "0", "1.."},
		{"serverPort too big", base.set("system", "serverPort", "70000"), "system", "serverPort", "70000", "0..65535"},
		{"serverPort leaves gossip no room", base.set("system", "serverPort", "65534").set("gossip", "label", "x"), "system", "serverPort", "65534", "65532"},
		{"serverPort leaves NATS no room", base.set("system", "serverPort", "65532").set("nats", "bucket", "x"), "system", "serverPort", "65532", "65531"},
		{"dashboardHttpPort bad", base.set("system", "dashboardHttpPort", "x"), "system", "dashboardHttpPort", "x", "integer"},
		{"getProcessThreadCount zero", base.set("system", "getProcessThreadCount", "0"), "system", "getProcessThreadCount", "0", "1.."},
		{"putProcessThreadCount bad", base.set("system", "putProcessThreadCount", "(1"), "system", "putProcessThreadCount", "(1", "integer"},
		{"quartzThreadCount bad", base.set("system", "quartzThreadCount", "1/0"), "system", "quartzThreadCount", "1/0", "division by zero"},
		{"maxCheckpoints zero", base.set("system", "maxCheckpoints", "0"), "system", "maxCheckpoints", "0", "1.."},
		{"checkpointInterval bad", base.set("system", "checkpointInterval", "1h"), "system", "checkpointInterval", "1h", "integer"},
		{"maxTxTimeoutTimerCapacity bad", base.set("system", "maxTxTimeoutTimerCapacity", "-3"), "system", "maxTxTimeoutTimerCapacity", "-3", "1.."},
		{"maxTxTimeoutInSeconds bad", base.set("system", "maxTxTimeoutInSeconds", "0"), "system", "maxTxTimeoutInSeconds", "0", "1.."},
		{"flushTxLogAtCommit 3", base.set("system", "flushTxLogAtCommit", "3"), "system", "flushTxLogAtCommit", "3", "0 (let the OS flush), 1"},
		{"flushTxLogAtCommit -1", base.set("system", "flushTxLogAtCommit", "-1"), "system", "flushTxLogAtCommit", "-1", "2 (fsync once a second)"},
		{"acceptPublish yes", base.set("system", "acceptPublish", "yes"), "system", "acceptPublish", "yes", "true or false"},
		{"acceptSubscribe 1", base.set("system", "acceptSubscribe", "1"), "system", "acceptSubscribe", "1", "true or false"},
		{"stat bad", base.set("system", "stat", "on"), "system", "stat", "on", "true or false"},
		{"updateConsumerOffsets bad", base.set("system", "updateConsumerOffsets", "no"), "system", "updateConsumerOffsets", "no", "true or false"},
		{"loadMessageStoresInParallel bad", base.set("system", "loadMessageStoresInParallel", "2"), "system", "loadMessageStoresInParallel", "2", "true or false"},
		{"deletePolicy unknown name", base.set("system", "deletePolicy", "purge,10"), "system", "deletePolicy", "purge,10", "unknown policy"},
		{"deletePolicy no age", base.set("system", "deletePolicy", "delete"), "system", "deletePolicy", "delete", "needs an age"},
		{"deletePolicy bad age", base.set("system", "deletePolicy", "delete,x"), "system", "deletePolicy", "delete,x", "non-negative integer"},
		{"deletePolicy bad unit", base.set("system", "deletePolicy", "delete,3d"), "system", "deletePolicy", "delete,3d", "unit s, m or h"},
		{"deletePolicy archive flag", base.set("system", "deletePolicy", "archive,3,yes"), "system", "deletePolicy", "archive,3,yes", "true or false"},
		{"deleteWhen 5 fields", base.set("system", "deleteWhen", "0 6 * * ?"), "system", "deleteWhen", "0 6 * * ?", "5 fields"},
		{"deleteWhen 8 fields", base.set("system", "deleteWhen", "0 0 6 * * ? 2030 x"), "system", "deleteWhen", "0 0 6 * * ? 2030 x", "8 fields"},
		{"deleteWhen no ?", base.set("system", "deleteWhen", "0 0 6 * * *"), "system", "deleteWhen", "0 0 6 * * *", "exactly one"},
		{"deleteWhen hour 25", base.set("system", "deleteWhen", "0 0 25 * * ?"), "system", "deleteWhen", "0 0 25 * * ?", "Quartz cron"},
		{"deleteWhen garbage", base.set("system", "deleteWhen", "every day"), "system", "deleteWhen", "every day", "Quartz cron"},
		{"zk.zkConnect missing", base.del("zookeeper", "zk.zkConnect"), "zookeeper", "zk.zkConnect", "", "required"},
		{"zk.zkConnect blank", base.set("zookeeper", "zk.zkConnect", " "), "zookeeper", "zk.zkConnect", "", "required"},
		{"zk.zkSessionTimeoutMs bad", base.set("zookeeper", "zk.zkSessionTimeoutMs", "30s"), "zookeeper", "zk.zkSessionTimeoutMs", "30s", "integer"},
		{"zk.zkConnectionTimeoutMs bad", base.set("zookeeper", "zk.zkConnectionTimeoutMs", "0"), "zookeeper", "zk.zkConnectionTimeoutMs", "0", "1.."},
		{"zk.zkSyncTimeMs bad", base.set("zookeeper", "zk.zkSyncTimeMs", "-1"), "zookeeper", "zk.zkSyncTimeMs", "-1", "0.."},
		{"zk.zkEnable bad", base.set("zookeeper", "zk.zkEnable", "maybe"), "zookeeper", "zk.zkEnable", "maybe", "true or false"},
		{"zk.zkRoot slash", base.set("zookeeper", "zk.zkRoot", "/"), "zookeeper", "zk.zkRoot", "/", "ZooKeeper path"},
		{"zk.zkRoot empty element", base.set("zookeeper", "zk.zkRoot", "/a//b"), "zookeeper", "zk.zkRoot", "/a//b", "ZooKeeper path"},
		{"topic numPartitions bad", base.set("topic=test", "numPartitions", "two"), "topic=test", "numPartitions", "two", "integer"},
		{"topic unflushThreshold bad", base.set("topic=test", "unflushThreshold", "1.0"), "topic=test", "unflushThreshold", "1.0", "integer"},
		{"topic unflushInterval bad", base.set("topic=test", "unflushInterval", "-2"), "topic=test", "unflushInterval", "-2", "0.."},
		{"topic deletePolicy bad", base.set("topic=test", "deletePolicy", "keep,1"), "topic=test", "deletePolicy", "keep,1", "unknown policy"},
		{"topic deleteWhen bad", base.set("topic=test", "deleteWhen", "0 0 6 ? * ?"), "topic=test", "deleteWhen", "0 0 6 ? * ?", "exactly one"},
		{"topic acceptPublish bad", base.set("topic=test", "acceptPublish", "x"), "topic=test", "acceptPublish", "x", "true or false"},
		{"topic acceptSubscribe bad", base.set("topic=test", "acceptSubscribe", "x"), "topic=test", "acceptSubscribe", "x", "true or false"},
		{"topic group. without name", base.set("topic=test", "group.", "F"), "topic=test", "group.", "F", "group.<consumerGroup>"},
		{"topic name empty", base.addSection("topic="), "topic=", "", "", "non-empty"},
		{"topic name blank", base.addSection("topic=  "), "topic=", "", "", "non-empty"},
		{"topic name with space", base.addSection("topic=a b"), "topic=a b", "", "", "whitespace"},
		{"topic name with slash", base.addSection("topic=a/b"), "topic=a/b", "", "", "'/'"},
		{"topic name dot", base.addSection("topic=."), "topic=.", "", "", "'/'"},
		{"topic name bad regex", base.addSection("topic=a(b"), "topic=a(b", "", "", "regular expression"},
		{"topic name bad regex bracket", base.addSection("topic=[x"), "topic=[x", "", "", "regular expression"},
		{"no topic", base.dropSection("topic=test"), "topic=<name>", "", "", "at least one"},
		{"missing [system]", base.dropSection("system"), "system", "", "", "[system] section"},
		{"missing [zookeeper]", base.dropSection("zookeeper"), "zookeeper", "", "", "[zookeeper] section"},
		{"site dashboardAddr bad", base.set("site", "dashboardAddr", "nohost"), "site", "dashboardAddr", "nohost", "host:port"},
		{"site adminAddr bad port", base.set("site", "adminAddr", "127.0.0.1:99999"), "site", "adminAddr", "127.0.0.1:99999", "host:port"},
		{"site dashboard public without token", base.set("site", "dashboardAddr", "0.0.0.0:8120"), "site", "dashboardAddr", "0.0.0.0:8120", "token"},
		{"site admin public without token", base.set("site", "adminAddr", ":8125"), "site", "adminAddr", ":8125", "token"},
		{"gossip enable bad", base.set("gossip", "enable", "x"), "gossip", "enable", "x", "true or false"},
		{"gossip bind bad", base.set("gossip", "bind", "x"), "gossip", "bind", "x", "host:port"},
		{"gossip advertise bad", base.set("gossip", "advertise", "x:y"), "gossip", "advertise", "x:y", "host:port"},
		{"gossip join bad", base.set("gossip", "join", "127.0.0.1:1,nope"), "gossip", "join", "127.0.0.1:1,nope", "host:port"},
		// A secret's value is never quoted: errors end up in logs.
		{"gossip key not base64", base.set("gossip", "key", "!!!"), "gossip", "key", "(hidden)", "base64"},
		{"gossip key wrong length", base.set("gossip", "key", "AAEC"), "gossip", "key", "(hidden)", "16, 24 or 32"},
		{"gossip probeIntervalMs bad", base.set("gossip", "probeIntervalMs", "0"), "gossip", "probeIntervalMs", "0", "1.."},
		{"nats embeddedListen bad", base.set("nats", "embeddedListen", "4222"), "nats", "embeddedListen", "4222", "host:port"},
		{"nats embedded beyond loopback", base.set("nats", "embeddedListen", "0.0.0.0:4222"), "nats", "embeddedListen", "0.0.0.0:4222", "no authentication"},
		{"nats tlsCert without key", base.set("nats", "tlsCert", "/c.pem"), "nats", "tlsCert", "/c.pem", "together"},
		{"nats tlsKey without cert", base.set("nats", "tlsKey", "/k.pem"), "nats", "tlsKey", "/k.pem", "together"},
		{"replication listen bad", base.set("replication", "listen", "x"), "replication", "listen", "x", "host:port"},
		{"replication advertise bad", base.set("replication", "advertise", "relay.example"), "replication", "advertise", "relay.example", "host:port"},
		{"replication compression bad", base.set("replication", "compression", "gzip"), "replication", "compression", "gzip", "zstd, s2, none, auto"},
		{"replication bandwidth negative", base.set("replication", "bandwidthBytesPerSec", "-1"), "replication", "bandwidthBytesPerSec", "-1", "0.."},
		{"replication stuckAfterMs bad", base.set("replication", "stuckAfterMs", "soon"), "replication", "stuckAfterMs", "soon", "integer"},
		{"limits maxConnections negative", base.set("limits", "maxConnections", "-1"), "limits", "maxConnections", "-1", "0.."},
		{"limits idleTimeoutMs bad", base.set("limits", "idleTimeoutMs", "10m"), "limits", "idleTimeoutMs", "10m", "integer"},
		{"limits writeTimeoutMs zero", base.set("limits", "writeTimeoutMs", "0"), "limits", "writeTimeoutMs", "0", "1.."},
		{"limits connection share too small", base.set("limits", "maxConnectionBufferedBytes", "1048576"), "limits", "maxConnectionBufferedBytes", "1048576", "16777236.."},
		{"limits buffered below share", base.set("limits", "maxBufferedBytes", "20000000"), "limits", "maxBufferedBytes", "20000000", "33554432.."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, _, err := Parse("conf/server.ini", []byte(c.d.String()))
			if err == nil {
				t.Fatalf("no error; loaded %+v", s.System)
			}
			if s != nil {
				t.Errorf("a Server came back with an error")
			}
			l := errorList(t, err)
			var match *Error
			for _, e := range l {
				if e.Section == c.section && e.Key == c.key {
					match = e
				}
			}
			if match == nil {
				t.Fatalf("no error for [%s] %s in %v", c.section, c.key, err)
			}
			if match.File != "conf/server.ini" || match.Value != c.value || !strings.Contains(match.Expected, c.expected) {
				t.Errorf("got %+v, want value %q and expected containing %q", *match, c.value, c.expected)
			}
			msg := match.Error()
			for _, part := range []string{"config: ", "conf/server.ini", "[" + c.section + "]", c.key} {
				if !strings.Contains(msg, part) {
					t.Errorf("message %q lacks %q", msg, part)
				}
			}
			if c.key != "" && !strings.Contains(msg, fmt.Sprintf("%q", c.value)) {
				t.Errorf("message %q lacks the value", msg)
			}
			var one *Error
			if !errors.As(err, &one) {
				t.Errorf("errors.As(*Error) failed on %v", err)
			}
		})
	}
}

func TestAllErrorsCollected(t *testing.T) {
	d := minimalDoc().set("system", "brokerId", "5000").set("system", "deletePolicy", "nope").
		set("topic=test", "deleteWhen", "bad").del("zookeeper", "zk.zkConnect")
	_, _, err := Parse("server.ini", []byte(d.String()))
	l := errorList(t, err)
	got := map[string]bool{}
	for _, e := range l {
		got[e.Section+"/"+e.Key] = true
	}
	for _, want := range []string{"system/brokerId", "system/deletePolicy", "topic=test/deleteWhen", "zookeeper/zk.zkConnect"} {
		if !got[want] {
			t.Errorf("missing error %s in %v", want, err)
		}
	}
	if len(l) != 4 {
		t.Errorf("want 4 errors, got %d: %v", len(l), err)
	}
	if !strings.Contains(err.Error(), "4 errors") {
		t.Errorf("message: %v", err)
	}
}

func TestZkConnectOptionalWhenDisabled(t *testing.T) {
	s, _ := mustParse(t, minimalDoc().del("zookeeper", "zk.zkConnect").set("zookeeper", "zk.zkEnable", "false"))
	if s.ZooKeeper.Enable || s.ZooKeeper.Connect != DefaultZkConnect {
		t.Errorf("zk: %+v", s.ZooKeeper)
	}
}

func TestWarnings(t *testing.T) {
	cases := []struct {
		name    string
		d       doc
		text    string // raw text instead of d when set
		section string
		key     string
		message string
		unknown bool // the warning marks an unknown key or section
	}{
		{"unknown system key", minimalDoc().set("system", "brokerID", "1"), "", "system", "brokerID", `did you mean "brokerId"`, true},
		{"unknown system key 2", minimalDoc().set("system", "unflushThresold", "1"), "", "system", "unflushThresold", `did you mean "unflushThreshold"`, true},
		{"unknown zookeeper key", minimalDoc().set("zookeeper", "zk.zkConect", "x"), "", "zookeeper", "zk.zkConect", `did you mean "zk.zkConnect"`, true},
		{"unknown topic key", minimalDoc().set("topic=test", "partitions", "2"), "", "topic=test", "partitions", `did you mean "numPartitions"`, true},
		{"unknown site key", minimalDoc().set("site", "nmae", "x"), "", "site", "nmae", `did you mean "name"`, true},
		{"unknown gossip key", minimalDoc().set("gossip", "joins", "x"), "", "gossip", "joins", `did you mean "join"`, true},
		{"unknown nats key", minimalDoc().set("nats", "urls", "x"), "", "nats", "urls", `did you mean "url"`, true},
		{"unknown replication key", minimalDoc().set("replication", "compress", "x"), "", "replication", "compress", `did you mean "compression"`, true},
		{"inert system key", minimalDoc().set("system", "topics", "x"), "", "system", "topics", "no effect", false},
		{"inert topic key", minimalDoc().set("topic=test", "topic", "x"), "", "topic=test", "topic", "no effect", false},
		{"system key in zookeeper", minimalDoc().set("zookeeper", "brokerId", "3"), "", "zookeeper", "brokerId", "no effect", false},
		{"unknown section", minimalDoc().addSection("extra"), "", "extra", "", "unknown section", true},
		{"topic stat neither true nor false", minimalDoc().set("system", "stat", "true").set("topic=test", "stat", "yes"), "", "topic=test", "stat", "reads it as false", false},
		{"delete policy extra field", minimalDoc().set("system", "deletePolicy", "delete,1,2"), "", "system", "deletePolicy", "ignored", false},
		{"key outside sections", nil, "orphan=1\n" + minimalDoc().String(), "", "orphan", "outside any section", false},
		{"repeated key", nil, minimalDoc().String() + "[system]\nbrokerId=3\n", "system", "", "more than once", false},
		{"misspelt section", minimalDoc().addSection("replicaton"), "", "replicaton", "", "did you mean [replication]?", true},
		{"misspelt topic section", minimalDoc().addSection("topics=orders"), "", "topics=orders", "", "did you mean [topic=orders]?", true},
		{"minSyncSites typo", minimalDoc().set("topic=test", "minSyncSite", "1"), "", "topic=test", "minSyncSite", `did you mean "minSyncSites"`, true},
		{"stuckAfterMs typo", minimalDoc().set("replication", "stuckAfterMS", "1"), "", "replication", "stuckAfterMS", `did you mean "stuckAfterMs"`, true},
		{"old MetaQ slave section", minimalDoc().addSection("slave"), "", "slave", "", "no effect", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := c.text
			if text == "" {
				text = c.d.String()
			}
			s, w, err := Parse("a/server.ini", []byte(text))
			if err != nil {
				t.Fatalf("a warning case failed to load: %v", err)
			}
			got, ok := findWarning(w, c.section, c.key)
			if !ok {
				t.Fatalf("no warning for [%s] %s in %v", c.section, c.key, w)
			}
			if got.File != "a/server.ini" || !strings.Contains(got.Message, c.message) {
				t.Errorf("warning %+v, want message containing %q", got, c.message)
			}
			if got.Unknown != c.unknown {
				t.Errorf("warning %+v: Unknown %v, want %v", got, got.Unknown, c.unknown)
			}
			var ue *UnknownError
			if err := CheckUnknown(w); c.unknown != errors.As(err, &ue) {
				t.Errorf("CheckUnknown = %v, want an *UnknownError: %v", err, c.unknown)
			} else if c.unknown && !strings.Contains(err.Error(), c.message) {
				t.Errorf("CheckUnknown = %q lacks %q", err, c.message)
			}
			if !strings.Contains(got.String(), "a/server.ini") {
				t.Errorf("String() %q lacks the file", got.String())
			}
			if c.name == "topic stat neither true nor false" && s.Topics[0].Stat {
				t.Errorf("stat=yes must read as false, as in MetaQ")
			}
			if c.name == "repeated key" && s.System.BrokerID != 3 {
				t.Errorf("last value should win, brokerId=%d", s.System.BrokerID)
			}
		})
	}
}

func TestIniSyntax(t *testing.T) {
	text := `;; MetaQ style comment
; single ';' comment
# hash comment

[system]
brokerId = 1
numPartitions: 2
unflushThreshold=0
unflushInterval=10000
maxSegmentSize=1024*1024*1024 
maxTransferSize=1048576
dataPath=/srv/a;b#c
deleteWhen=0 0 6,18 * * ?
hostName

[zookeeper]
zk.zkConnect=127.0.0.1:2181

[topic=empty]

[topic=quoted]
dataPath="/srv/q"
`
	s, w := mustParseText(t, text)
	if len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	if s.System.BrokerID != 1 || s.System.NumPartitions != 2 || s.System.MaxSegmentSize != 1<<30 {
		t.Errorf("system: %+v", s.System)
	}
	if s.System.DataPath != "/srv/a;b#c" {
		t.Errorf("inline comment characters must stay in the value: %q", s.System.DataPath)
	}
	if s.System.DeleteWhen.Text != "0 0 6,18 * * ?" {
		t.Errorf("deleteWhen %q", s.System.DeleteWhen.Text)
	}
	if s.System.HostName != "" {
		t.Errorf("a bare key is blank, got %q", s.System.HostName)
	}
	if len(s.Topics) != 2 || s.Topics[0].Name != "empty" || s.Topics[1].DataPath != `"/srv/q"` {
		t.Errorf("topics: %+v", s.Topics)
	}
}

func mustParseText(t *testing.T, text string) (*Server, []Warning) {
	t.Helper()
	s, w, err := Parse("server.ini", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s, w
}

func TestSyntaxError(t *testing.T) {
	_, _, err := Parse("bad.ini", []byte("[system\nbrokerId=0\n"))
	l := errorList(t, err)
	if l[0].File != "bad.ini" || !strings.Contains(l[0].Expected, "INI syntax") {
		t.Errorf("got %+v", *l[0])
	}
}

func TestRawAndChecksum(t *testing.T) {
	data := []byte(minimalDoc().String())
	s, _, err := Parse("server.ini", data)
	if err != nil {
		t.Fatal(err)
	}
	if string(s.Raw) != string(data) || s.File != "server.ini" {
		t.Errorf("raw/file not kept")
	}
	// Value computed independently: CRC32 IEEE as Java's FileUtils.checksumCRC32.
	if s.Checksum != crc32Reference(data) {
		t.Errorf("checksum %d", s.Checksum)
	}
}

// crc32Reference is a bitwise CRC-32 (IEEE, reflected, poly 0xEDB88320).
func crc32Reference(b []byte) uint32 {
	crc := ^uint32(0)
	for _, c := range b {
		crc ^= uint32(c)
		for range 8 {
			if crc&1 == 1 {
				crc = crc>>1 ^ 0xEDB88320
			} else {
				crc >>= 1
			}
		}
	}
	return ^crc
}

func TestTopicFor(t *testing.T) {
	text := minimalDoc().dropSection("topic=test").
		set("topic=log-*", "numPartitions", "2").
		set("topic=a.b", "numPartitions", "3").
		set("topic=log-app", "numPartitions", "4").
		set("topic=*", "numPartitions", "5").String()
	s, _ := mustParseText(t, text)
	cases := []struct {
		topic string
		want  string
		parts int
	}{
		{"log-web", "log-*", 2},
		{"log-", "log-*", 2},
		{"log-app", "log-app", 4}, // an exact section wins over an earlier pattern
		{"a.b", "a.b", 3},
		{"aXb", "a.b", 3}, // MetaQ uses the name as a raw regex
		{"xa.b", "*", 5},  // full match only
		{"anything", "*", 5},
	}
	for _, c := range cases {
		t.Run(c.topic, func(t *testing.T) {
			tp, ok := s.TopicFor(c.topic)
			if !ok || tp.Name != c.want || tp.NumPartitions != c.parts {
				t.Errorf("TopicFor(%q) = %q %d %v, want %q %d", c.topic, tp.Name, tp.NumPartitions, ok, c.want, c.parts)
			}
		})
	}
	s2, _ := mustParse(t, minimalDoc().set("topic=meta-*", "stat", "true"))
	for _, name := range []string{"tes", "testx", "xtest", "meta", "other"} {
		if tp, ok := s2.TopicFor(name); ok {
			t.Errorf("TopicFor(%q) matched %q", name, tp.Name)
		}
	}
	if tp, ok := s2.TopicFor("meta-x"); !ok || !tp.Stat {
		t.Errorf("meta-x: %+v %v", tp, ok)
	}
	// A Topic copied around without its compiled pattern still matches.
	bare := &Server{Topics: []Topic{{Name: "q-*", Pattern: TopicPattern("q-*")}}}
	if _, ok := bare.TopicFor("q-1"); !ok {
		t.Error("uncompiled pattern did not match")
	}
}

// TestJavaSamples loads files written in the shape of MetaQ 1.4.6's shipped
// conf/server.ini, sample.server.ini (GBK comments, blank values inherited
// from [system]) and async_slave.properties (GBK, CRLF), plus the server.ini
// the spec's vectors were verified with. None has a key we do not know, so no
// warnings either. TestJavaConfDir loads the real shipped files when given.
func TestJavaSamples(t *testing.T) {
	t.Run("server.ini", func(t *testing.T) {
		s, w, err := Load("testdata/metaq-style-server.ini")
		if err != nil || len(w) != 0 {
			t.Fatalf("err %v, warnings %v", err, w)
		}
		if s.System.UnflushThreshold != 0 || !s.System.UpdateConsumerOffsets || !s.System.Stat || s.System.DashboardHTTPPort != 8120 {
			t.Errorf("system: %+v", s.System)
		}
		if len(s.Topics) != 2 || s.Topics[0].Name != "test" || s.Topics[1].Name != "meta-test" {
			t.Errorf("topics: %+v", s.Topics)
		}
		if s.ZooKeeper.Connect != "localhost:2181" {
			t.Errorf("zk: %+v", s.ZooKeeper)
		}
	})
	t.Run("sample.server.ini", func(t *testing.T) {
		s, w, err := Load("testdata/metaq-style-sample.server.ini")
		if err != nil || len(w) != 0 {
			t.Fatalf("err %v, warnings %v", err, w)
		}
		tp := s.Topics[0]
		// deletePolicy=, unflushInterval= and unflushThreshold= are blank: inherited.
		if tp.Name != "test" || tp.NumPartitions != 10 || tp.UnflushThreshold != 1000 || tp.UnflushInterval != 10*time.Second ||
			tp.DeletePolicy.Text != "delete,168" || !tp.Stat {
			t.Errorf("topic: %+v", tp)
		}
		if s.System.GetProcessThreadCount != 80 || !s.ZooKeeper.Enable || s.System.HostName != "" {
			t.Errorf("system: %+v", s.System)
		}
	})
	t.Run("async_slave.properties", func(t *testing.T) {
		sl, w, err := LoadSlave("testdata/metaq-style-async_slave.properties")
		if err != nil || len(w) != 0 {
			t.Fatalf("err %v, warnings %v", err, w)
		}
		want := Slave{File: "testdata/metaq-style-async_slave.properties", SlaveID: 0, SlaveGroup: "meta-slave-group",
			SlaveMaxDelay: 500 * time.Millisecond, AutoSyncMasterConfig: true, Compression: "zstd"}
		if !reflect.DeepEqual(*sl, want) {
			t.Errorf("got %+v", *sl)
		}
	})
	t.Run("vectors server.ini", func(t *testing.T) {
		s, w, err := Load("testdata/vectors-server.ini")
		if err != nil || len(w) != 0 {
			t.Fatalf("err %v, warnings %v", err, w)
		}
		if tp, ok := s.TopicFor("test"); !ok || tp.NumPartitions != 2 {
			t.Errorf("test topic: %+v", tp)
		}
	})
}

// TestJavaConfDir loads MetaQ's own shipped files unchanged from the folder
// named by METAQ_JAVA_CONF_DIR (metamorphosis-server-wrapper/conf of a MetaQ
// 1.4.6 checkout); they are not part of this repository.
func TestJavaConfDir(t *testing.T) {
	dir := os.Getenv("METAQ_JAVA_CONF_DIR")
	if dir == "" {
		t.Skip("METAQ_JAVA_CONF_DIR is not set (a MetaQ 1.4.6 checkout's metamorphosis-server-wrapper/conf)")
	}
	for _, name := range []string{"server.ini", "sample.server.ini"} {
		if _, w, err := Load(filepath.Join(dir, name)); err != nil || len(w) != 0 {
			t.Errorf("%s: err %v, warnings %v", name, err, w)
		}
	}
	if _, w, err := LoadSlave(filepath.Join(dir, "async_slave.properties")); err != nil || len(w) != 0 {
		t.Errorf("async_slave.properties: err %v, warnings %v", err, w)
	}
}

// TestMetaQFilesHaveNoUnknownKeys loads the configuration files of MetaQ
// 1.4.6's own source tree (testdata/metaq-1.4.6, see its README): every key
// they use is known, so the commands that refuse unknown keys accept them.
func TestMetaQFilesHaveNoUnknownKeys(t *testing.T) {
	files, err := filepath.Glob("testdata/metaq-1.4.6/*")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		var w []Warning
		switch {
		case strings.HasSuffix(f, ".ini"):
			_, w, err = Load(f)
		case strings.Contains(f, "samsa_master"):
			_, w, err = LoadSamsa(f)
		case strings.HasSuffix(f, ".properties"):
			_, w, err = LoadSlave(f)
		default:
			continue
		}
		n++
		if err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if err := CheckUnknown(w); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if n < 15 {
		t.Fatalf("only %d of MetaQ's files found", n)
	}
}

// TestConfFiles loads the repository's samples.
func TestConfFiles(t *testing.T) {
	s, w, err := Load("../../conf/server.ini")
	if err != nil || len(w) != 0 {
		t.Fatalf("conf/server.ini: err %v, warnings %v", err, w)
	}
	if s.System.HostName != "127.0.0.1" || s.ZooKeeper.Connect != "127.0.0.1:2181" {
		t.Errorf("samples must use loopback: %q %q", s.System.HostName, s.ZooKeeper.Connect)
	}
	if len(s.Topics) < 2 || s.Topics[0].Name != "test" {
		t.Errorf("topics: %+v", s.Topics)
	}
	over := s.Topics[1]
	if over.NumPartitions == s.System.NumPartitions || over.DeletePolicy == s.System.DeletePolicy || over.DeleteWhen.Text == s.System.DeleteWhen.Text {
		t.Errorf("second sample topic should override: %+v", over)
	}
	sl, w, err := LoadSlave("../../conf/async_slave.properties")
	if err != nil || len(w) != 0 {
		t.Fatalf("conf/async_slave.properties: err %v, warnings %v", err, w)
	}
	if sl.SlaveID != 0 || sl.MasterAddress != "127.0.0.1:8123" {
		t.Errorf("slave: %+v", sl)
	}
}

// TestConfDocumentsEveryKey: every key in the samples is preceded by a
// comment, and every known key appears.
func TestConfDocumentsEveryKey(t *testing.T) {
	check := func(path, comment string, keys map[string][]string) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		section := ""
		prev := ""
		for line := range strings.SplitSeq(string(data), "\n") {
			line = strings.TrimSpace(line)
			switch {
			case strings.HasPrefix(line, "["):
				section = strings.Trim(line, "[]")
				if strings.HasPrefix(section, topicPrefix) {
					section = "topic"
				}
			case line == "" || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "#"):
			default:
				k, _, _ := strings.Cut(line, "=")
				seen[section+"/"+k] = true
				if !strings.HasPrefix(prev, comment) && !strings.HasPrefix(prev, strings.TrimSpace(comment)) {
					// Keys of one group may share the comment above them.
					if !strings.Contains(prev, "=") {
						t.Errorf("%s: key %s is not preceded by a %q comment", path, k, comment)
					}
				}
			}
			prev = line
		}
		for section, list := range keys {
			for _, k := range list {
				if !seen[section+"/"+k] {
					t.Errorf("%s: key [%s] %s missing", path, section, k)
				}
			}
		}
	}
	check("../../conf/server.ini", ";;", map[string][]string{
		"system": systemKeys, "zookeeper": zkKeys, "topic": topicKeys, "site": siteKeys,
		"gossip": gossipKeys, "nats": natsKeys, "replication": replicationKeys,
	})
	check("../../conf/async_slave.properties", "#", map[string][]string{"": slaveKeys})
}

// TestLoadCreatesNothing: loading never creates data directories or files.
func TestLoadCreatesNothing(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	d := minimalDoc().set("system", "dataPath", data).set("system", "dataLogPath", filepath.Join(dir, "txlog")).
		set("topic=test", "dataPath", filepath.Join(dir, "topicdata"))
	path := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(d.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(path); err != nil {
		t.Fatal(err)
	}
	// A failing load must not create anything either.
	bad := filepath.Join(dir, "bad.ini")
	if err := os.WriteFile(bad, []byte(d.set("system", "brokerId", "x").String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(bad); err == nil {
		t.Fatal("bad file loaded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v after loading", names)
	}
}

func TestLoadAppClassPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "conf"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "conf", "server.ini")
	if err := os.WriteFile(path, []byte(minimalDoc().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, err := Load(path)
	if err != nil || s.System.AppClassPath != "" {
		t.Fatalf("without provided/: %q %v", s.System.AppClassPath, err)
	}
	if err := os.Mkdir(filepath.Join(dir, "provided"), 0o755); err != nil {
		t.Fatal(err)
	}
	s, _, err = Load(path)
	if err != nil || s.System.AppClassPath != filepath.Join(dir, "provided")+"/" {
		t.Fatalf("with provided/: %q %v", s.System.AppClassPath, err)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, _, err := Load(filepath.Join(t.TempDir(), "nope.ini"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("got %v", err)
	}
	_, _, err = LoadSlave(filepath.Join(t.TempDir(), "nope.properties"))
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("slave: got %v", err)
	}
}

func TestBareKeyOnlyInItsSection(t *testing.T) {
	text := minimalDoc().set("topic=test", "stat", "true").String() + "[topic=other]\nstat\n"
	s, _ := mustParseText(t, text)
	if !s.Topics[0].Stat || s.Topics[1].Stat {
		t.Errorf("stat: %v %v", s.Topics[0].Stat, s.Topics[1].Stat)
	}
}

func TestLineEndingsAndBOM(t *testing.T) {
	text := minimalDoc().set("system", "deleteWhen", "0 0 3 * * ?").String()
	for name, data := range map[string]string{
		"CRLF": strings.ReplaceAll(text, "\n", "\r\n"),
		"BOM":  "\xef\xbb\xbf" + text,
	} {
		t.Run(name, func(t *testing.T) {
			s, w, err := Parse("server.ini", []byte(data))
			if err != nil || len(w) != 0 {
				t.Fatalf("err %v, warnings %v", err, w)
			}
			if s.System.DeleteWhen.Text != "0 0 3 * * ?" || s.ZooKeeper.Connect != "127.0.0.1:2181" {
				t.Errorf("values: %q %q", s.System.DeleteWhen.Text, s.ZooKeeper.Connect)
			}
		})
	}
}

func TestTopicMinSyncSites(t *testing.T) {
	base := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n"
	s, _, err := Parse("server.ini", []byte(base+"[topic=plain]\n[topic=orders]\nminSyncSites=2\nsyncDegrade=async\n"))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := s.TopicFor("plain")
	orders, _ := s.TopicFor("orders")
	if plain.MinSyncSites != 0 || plain.SyncDegrade != SyncDegradeRefuse || orders.MinSyncSites != 2 || orders.SyncDegrade != SyncDegradeAsync {
		t.Fatalf("plain %d %q, orders %d %q", plain.MinSyncSites, plain.SyncDegrade, orders.MinSyncSites, orders.SyncDegrade)
	}
	_, _, err = Parse("server.ini", []byte(base+"[topic=orders]\nminSyncSites=-1\nsyncDegrade=maybe\n"))
	if err == nil || !strings.Contains(err.Error(), "minSyncSites") || !strings.Contains(err.Error(), "refuse or async") {
		t.Fatalf("bad values: %v", err)
	}
	// A change of minSyncSites is a topic change, applied by a reload.
	s2, _, err := Parse("server.ini", []byte(base+"[topic=plain]\n[topic=orders]\nminSyncSites=1\nsyncDegrade=async\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := Diff(s, s2); len(c.TopicsChanged) != 1 || c.TopicsChanged[0] != "orders" || len(c.RestartKeys) != 0 {
		t.Fatalf("diff %+v", c)
	}
}

// TestOptionalFeaturesWritten: the bundle decides which optional parts run
// from these flags, which follow what the operator wrote (a section, even
// an empty one, or a key), not the defaults filled in for every file.
func TestOptionalFeaturesWritten(t *testing.T) {
	s, _ := mustParse(t, minimalDoc())
	if s.NATS.Enabled || s.NATS.EmbeddedListenSet || s.Site.Dashboard {
		t.Fatalf("a MetaQ file enables nothing: %+v %+v", s.NATS, s.Site)
	}
	s, _ = mustParse(t, minimalDoc().addSection("nats"))
	if !s.NATS.Enabled || s.NATS.EmbeddedListenSet || s.Site.Dashboard {
		t.Fatalf("an empty [nats] section: %+v %+v", s.NATS, s.Site)
	}
	if s, _ := mustParse(t, minimalDoc().set("replication", "listen", "127.0.0.1:0")); !s.Replication.ListenSet {
		t.Errorf("[replication] listen written: %+v", s.Replication)
	}
	if s, _ := mustParse(t, minimalDoc().set("replication", "listen", "")); s.Replication.ListenSet || s.Replication.Listen != "" {
		t.Errorf("[replication] listen= (empty) is the default, the MetaQ port: %+v", s.Replication)
	}
	s, _ = mustParse(t, minimalDoc().set("nats", "embeddedListen", "127.0.0.1:0"))
	if !s.NATS.Enabled || !s.NATS.EmbeddedListenSet {
		t.Fatalf("[nats] embeddedListen written: %+v", s.NATS)
	}
	for _, d := range []doc{
		minimalDoc().set("system", "dashboardHttpPort", "8120"),
		minimalDoc().set("site", "dashboardAddr", "127.0.0.1:8120"),
	} {
		if s, _ := mustParse(t, d); !s.Site.Dashboard {
			t.Errorf("dashboard not enabled by %s", d)
		}
	}
}

// TestZkConnectBeside: MetaQ's samsa_server1.ini sets no ZooKeeper key; its
// broker then takes zk.zkConnect from beside the file (here: zk.properties,
// as MetaQ's integration resources keep it, or a server.ini read as
// properties). With neither, the error names both places.
func TestZkConnectBeside(t *testing.T) {
	src := filepath.Join("testdata", "metaq-1.4.6", "integration-test-resources")
	ini, err := os.ReadFile(filepath.Join(src, "samsa_server1.ini"))
	if err != nil {
		t.Fatal(err)
	}
	zkProps, err := os.ReadFile(filepath.Join(src, "zk.properties"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("MetaQ's files as they are", func(t *testing.T) {
		s, w, err := Load(filepath.Join(src, "samsa_server1.ini"))
		if err != nil || s.ZooKeeper.Connect != "localhost:2181" || CheckUnknown(w) != nil {
			t.Fatalf("connect %v, err %v, warnings %v", s, err, w)
		}
		if len(w) != 1 || !strings.Contains(w[0].String(), "zk.properties") {
			t.Errorf("warnings %v, want one saying where zk.zkConnect came from", w)
		}
	})
	t.Run("neither", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "samsa_server1.ini")
		os.WriteFile(path, ini, 0o644)
		_, _, err := Load(path)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "zk.properties")) ||
			!strings.Contains(err.Error(), filepath.Join(dir, "server.ini")) || !strings.Contains(err.Error(), "zk.zkConnect") {
			t.Fatalf("err %v, want one naming zk.zkConnect, %s/zk.properties and %s/server.ini", err, dir, dir)
		}
		// Bytes parsed without a path: the key is simply required.
		if _, _, err := Parse("x.ini", ini); err == nil || !strings.Contains(err.Error(), "the key is required") {
			t.Fatalf("Parse: %v", err)
		}
	})
	t.Run("server.ini beside", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "samsa_server1.ini")
		os.WriteFile(path, ini, 0o644)
		os.WriteFile(filepath.Join(dir, "server.ini"), []byte("[zookeeper]\n;zk.zkConnect=nothere:1\nzk.zkConnect = 127.0.0.1:2999\n"), 0o644)
		if s, _, err := Load(path); err != nil || s.ZooKeeper.Connect != "127.0.0.1:2999" {
			t.Fatalf("%v %v", s, err)
		}
		// zk.properties comes first.
		os.WriteFile(filepath.Join(dir, "zk.properties"), zkProps, 0o644)
		if s, _, err := Load(path); err != nil || s.ZooKeeper.Connect != "localhost:2181" {
			t.Fatalf("%v %v", s, err)
		}
	})
}
