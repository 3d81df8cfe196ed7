package config

import (
	"strings"
	"testing"
)

const masterIni = `;; the master's file
[system]
brokerId=1
hostName=master.example
serverPort=8123
dashboardHttpPort=8120
dataPath=/srv/master
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576

[zookeeper]
zk.zkConnect=zk.bj:2181
zk.zkEnable=false

[site]
name=bj

[gossip]
bind=10.0.0.1:8126
label=prod

[topic=orders]
numPartitions=4

[topic=new]
`

const slaveIni = `[system]
brokerId=1
hostName=slave.example
serverPort=9123
dashboardHttpPort=9120
dataPath=/srv/slave
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576

[zookeeper]
zk.zkConnect=zk.hf:2181
zk.zkEnable=false

[site]
name=hf
token=slave-token

[replication]
tlsCert=/etc/hf.crt
tlsKey=/etc/hf.key

[topic=orders]
numPartitions=4
`

// TestKeepHostKeys: a file taken from elsewhere keeps this host's identity
// and secrets and takes everything else, and applying it again is a no-op.
func TestKeepHostKeys(t *testing.T) {
	got := KeepHostKeys([]byte(masterIni), []byte(slaveIni))
	cfg, _, err := Parse("server.ini", got)
	if err != nil {
		t.Fatalf("the merged file does not load: %v\n%s", err, got)
	}
	checks := []struct{ name, got, want string }{
		{"hostName", cfg.System.HostName, "slave.example"},
		{"dataPath", cfg.System.DataPath, "/srv/slave"},
		{"site name", cfg.Site.Name, "hf"},
		{"token", cfg.Site.Token, "slave-token"},
		{"zkConnect", cfg.ZooKeeper.Connect, "zk.hf:2181"},
		{"replication tlsCert", cfg.Replication.TLSCert, "/etc/hf.crt"},
		{"gossip bind (the slave sets none: its default)", cfg.Gossip.Bind, "127.0.0.1:9126"},
		{"gossip label (shared)", cfg.Gossip.Label, "prod"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	if cfg.System.ServerPort != 9123 || cfg.System.DashboardHTTPPort != 9120 {
		t.Errorf("ports %d %d, want the slave's 9123 9120", cfg.System.ServerPort, cfg.System.DashboardHTTPPort)
	}
	if _, ok := cfg.TopicFor("new"); !ok {
		t.Errorf("the master's new topic is missing:\n%s", got)
	}
	if !strings.HasPrefix(string(got), ";; the master's file\n") {
		t.Errorf("the master's comments were not kept:\n%s", got)
	}
	if again := KeepHostKeys([]byte(masterIni), got); string(again) != string(got) {
		t.Errorf("not idempotent:\nfirst:\n%s\nagain:\n%s", got, again)
	}
	if same := KeepHostKeys([]byte(slaveIni), []byte(slaveIni)); string(same) == "" {
		t.Error("empty result")
	}
}
