// Package brokertest runs the project's broker in process for other
// packages' tests: a store in a temp dir, registered in a test ZooKeeper,
// restartable on the same port and data.
package brokertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/internal/testutil"
)

// Broker is one in-process broker (brokerId 0, 127.0.0.1, group commit).
type Broker struct {
	t    testing.TB
	log  *slog.Logger
	cfg  *config.Server
	dir  string
	addr string
	st   *store.Store
	reg  *registry.Registry
	b    *broker.Broker
}

// Start runs a broker registered under root in the ZooKeeper at zk, with
// the given topics and partition counts; it stops when the test ends. log
// may be nil.
func Start(t testing.TB, zk, root string, topics map[string]int, log *slog.Logger) *Broker {
	t.Helper()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	dir := t.TempDir()
	// The registry advertises serverPort, so listen on a port picked now.
	port := testutil.FreePort(t)
	ini := fmt.Sprintf(`[system]
brokerId=0
hostName=127.0.0.1
serverPort=%d
numPartitions=1
unflushThreshold=0
unflushInterval=10000
maxSegmentSize=4096
maxTransferSize=1048576
deletePolicy=delete,168
dataPath=%s
[zookeeper]
zk.zkConnect=%s
zk.zkRoot=%s
zk.zkSyncTimeMs=100
`, port, dir, zk, root)
	for name, n := range topics {
		ini += fmt.Sprintf("[topic=%s]\nnumPartitions=%d\n", name, n)
	}
	cfg, _, err := config.Parse("server.ini", []byte(ini))
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	rb := &Broker{t: t, log: log, cfg: cfg, dir: dir, addr: fmt.Sprintf("127.0.0.1:%d", port)}
	rb.Restart()
	t.Cleanup(rb.Stop)
	return rb
}

// Addr is the broker's host:port.
func (rb *Broker) Addr() string { return rb.addr }

// Restart starts the broker again on the same port and data after Stop
// (Start calls it the first time).
func (rb *Broker) Restart() {
	rb.t.Helper()
	var err error
	rb.st, err = store.Open(store.Options{Dir: rb.dir, BrokerID: 0, SegmentBytes: rb.cfg.System.MaxSegmentSize})
	if err != nil {
		rb.t.Fatalf("open store: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	rb.reg, err = registry.New(ctx, registry.Options{Connect: rb.cfg.ZooKeeper.Connect, Root: rb.cfg.ZooKeeper.Root,
		SyncTime: 100 * time.Millisecond, SessionTimeout: 4 * time.Second, Host: "127.0.0.1", Port: rb.cfg.System.ServerPort})
	if err != nil {
		rb.t.Fatalf("registry: %v", err)
	}
	var b *broker.Broker
	for i := 0; i < 50; i++ { // the old port may linger briefly
		b, err = broker.New(broker.Options{Config: rb.cfg, Store: rb.st, Registry: rb.reg, ListenAddr: rb.addr, Logger: rb.log})
		if err == nil {
			// Start ties the broker to its context: it must outlive this call.
			if err = b.Start(context.Background()); err == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		rb.t.Fatalf("start broker: %v", err)
	}
	rb.b = b
}

// Stop closes the broker, its registry session and its store (idempotent).
func (rb *Broker) Stop() {
	if rb.b == nil {
		return
	}
	rb.b.Close()
	rb.reg.Close()
	rb.st.Close()
	rb.b = nil
}
