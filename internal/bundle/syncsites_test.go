package bundle

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSyncTopicThroughBundles: a master bundle whose server.ini gives a
// topic minSyncSites=1 refuses its puts (503) until a slave site connects,
// then acknowledges each one only once the slave bundle holds it; a topic
// without the key is served throughout.
func TestSyncTopicThroughBundles(t *testing.T) {
	t.Parallel()
	const topics = "[topic=sync]\nnumPartitions=1\nminSyncSites=1\n[topic=plain]\nnumPartitions=1\n"
	me := newEnv(t, topics)
	me.start(t)
	mc, err := dialMeta("127.0.0.1:" + strconv.Itoa(me.port))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, _, err := mc.put("sync", 0, []byte("refused")); err == nil || !strings.Contains(err.Error(), "put: 503") || !strings.Contains(err.Error(), "minSyncSites") {
		t.Fatalf("put to a synchronous topic without a slave site: %v", err)
	}
	if _, _, err := mc.put("plain", 0, []byte("served")); err != nil {
		t.Fatal(err)
	}

	se := &testEnv{dir: t.TempDir(), root: me.root, zk: me.zk, port: testutil.FreePort(t)}
	se.ini = filepath.Join(se.dir, "server.ini")
	se.writeINI(t, topics)
	props := filepath.Join(se.dir, "async_slave.properties")
	os.WriteFile(props, []byte("slaveId=0\nslaveGroup=hf\nslaveMaxDelayInMills=500\nautoSyncMasterConfig=false\n"), 0o644)
	slave := startBundle(t, Options{ConfigPath: se.ini, Mode: ModeSlave, PluginPath: props, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(se.port), AdminAddr: "127.0.0.1:0"})

	payload := []byte("on both sites")
	var off int64
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, off, err = mc.put("sync", 0, payload)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "put: 503") || time.Now().After(deadline) {
			t.Fatalf("put once the slave site runs: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	data, err := slave.Store.Read("sync", 0, off, 1<<10)
	if err != nil || len(data) < 20+len(payload) || !bytes.Equal(data[20:20+len(payload)], payload) {
		t.Fatalf("acknowledged record on the slave at %d: %q %v", off, data, err)
	}
}
