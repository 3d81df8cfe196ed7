package bundle

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"metaq/internal/testutil"
)

// TestMasterAndSlaveRegistration starts a master bundle and an async-slave
// bundle with the same brokerId and compares their znodes with the vector
// (spec vectors/zookeeper.txt): ids/0/master and slave0, the -m and -s0
// topic nodes, and ids/0 left as "" when the master stops cleanly while the
// slave is still registered.
func TestMasterAndSlaveRegistration(t *testing.T) {
	t.Parallel()
	me := newEnv(t, "[topic=test]\nnumPartitions=2\n")
	master := me.start(t)

	// The slave: same root and brokerId, its own port and data.
	se := &testEnv{dir: t.TempDir(), root: me.root, zk: me.zk, port: testutil.FreePort(t)}
	se.ini = filepath.Join(se.dir, "server.ini")
	se.writeINI(t, "[topic=test]\nnumPartitions=2\n")
	props := filepath.Join(se.dir, "async_slave.properties")
	os.WriteFile(props, []byte("slaveId=0\nslaveGroup=meta-slave-group\nslaveMaxDelayInMills=500\nautoSyncMasterConfig=false\n"), 0o644)
	slave, err := New(Options{
		ConfigPath: se.ini, Mode: ModeSlave, PluginPath: props, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(se.port), AdminAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := slave.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })

	zk := zkClient(t, me)
	mURL := "meta://127.0.0.1:" + strconv.Itoa(me.port)
	sURL := "meta://127.0.0.1:" + strconv.Itoa(se.port)
	want := map[string][2]string{
		"/brokers/ids/0":                        {"P", mURL},
		"/brokers/ids/0/master":                 {"E", mURL},
		"/brokers/ids/0/slave0":                 {"E", sURL},
		"/brokers/topics/test/0-m":              {"E", "2"},
		"/brokers/topics-pub/test/0-m":          {"E", `{"numParts":2,"broker":"0-m"}`},
		"/brokers/topics-sub/test/0-m":          {"E", `{"numParts":2,"broker":"0-m"}`},
		"/brokers/topics/test/0-s0":             {"E", "2"},
		"/brokers/topics-pub/test/0-s0":         {"E", `{"numParts":2,"broker":"0-s0"}`},
		"/brokers/topics-sub/test/0-s0":         {"E", `{"numParts":2,"broker":"0-s0"}`},
		"/brokers/ids/0/master_config_checksum": {"E", strconv.FormatUint(uint64(master.Config().Checksum), 10)},
		// Every master offers the compressed stream, with no [replication] section too.
		"/brokers/ids/0/replication": {"E", mustComp[*shipperComponent](t, master).Addr()},
	}
	for path, w := range want {
		data, st, err := zk.Get(context.Background(), me.root+path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		kind := "P"
		if st.EphemeralOwner != 0 {
			kind = "E"
		}
		if kind != w[0] || string(data) != w[1] {
			t.Errorf("%s = %s %q, want %s %q", path, kind, data, w[0], w[1])
		}
	}
	kids, _ := zk.Children(context.Background(), me.root+"/brokers/ids/0")
	if len(kids) != 4 {
		t.Errorf("ids/0 children = %v, want master, master_config_checksum, replication, slave0", kids)
	}

	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	data, _, err := zk.Get(context.Background(), me.root+"/brokers/ids/0")
	if err != nil || string(data) != "" {
		t.Errorf("ids/0 after the master's clean stop = %q %v, want \"\"", data, err)
	}
	kids, _ = zk.Children(context.Background(), me.root+"/brokers/ids/0")
	if strings.Join(kids, ",") != "slave0" {
		t.Errorf("ids/0 children after the master stopped = %v", kids)
	}
	if st := slave.Status(); st.Mode != "slave" || st.SlaveID != 0 {
		t.Errorf("slave status = %+v", st)
	}
}
