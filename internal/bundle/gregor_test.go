package bundle

import (
	"context"
	"log/slog"
	"strconv"
	"testing"

	"metaq/internal/testutil"
)

// TestGregorNeverRegisters: a gregor (synchronous) slave keeps out of
// ZooKeeper even when zk.zkEnable is true (see Samsa and gregor in broker/wire/doc.go), and accepts `sync`.
func TestGregorNeverRegisters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=test]\nnumPartitions=1\n")
	b, err := New(Options{ConfigPath: e.ini, Mode: ModeGregor, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(e.port), AdminAddr: "off"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Registry != nil || b.AdminAddr() != "" {
		t.Fatalf("gregor: registry %v, admin %q", b.Registry, b.AdminAddr())
	}
	zk := zkClient(t, e)
	if ok, _, err := zk.Exists(context.Background(), e.root+"/brokers"); ok || err != nil {
		t.Errorf("gregor wrote into ZooKeeper (%v)", err)
	}
	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	// A plain broker answers `sync` with 503; a gregor slave stores it under
	// the master's id (as in MetaQ's sync example).
	rep, err := mc.roundTrip("sync test 0 5 0 6393882542080 907060870", []byte("hello"))
	if err != nil || rep.code != 200 || string(rep.body) != "6393882542080 0 0" {
		t.Fatalf("sync: %v %d %q", err, rep.code, rep.body)
	}
}
