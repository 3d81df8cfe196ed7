//go:build linux

package broker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

const fdChildEnv = "METAQ_TEST_FD_CHILD"

// childFileLimit is the open-file limit of the child broker.
const childFileLimit = 256

// TestFDLimitChild is the broker process of TestIdleConnectionsUnderFileLimit,
// run only when the parent sets fdChildEnv: with a low open-file limit it
// serves on a free port, prints the address and runs until killed.
func TestFDLimitChild(t *testing.T) {
	dir := os.Getenv(fdChildEnv)
	if dir == "" {
		t.Skip("child process of TestIdleConnectionsUnderFileLimit")
	}
	lim := unix.Rlimit{Cur: childFileLimit, Max: childFileLimit}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit: %v", err)
	}
	// Small segments, so that the puts below open new segment files.
	cfg := parseConfig(t, bytes.Replace(iniWith(t, ""), []byte("maxSegmentSize=1073741824"), []byte("maxSegmentSize=65536"), 1))
	b := startBrokerDir(t, cfg, dir, nil)
	fmt.Printf("ADDR %s LIMIT %d\n", b.Addr(), b.opts.MaxConnections)
	select {}
}

// TestIdleConnectionsUnderFileLimit: 300 idle connections against a broker
// whose open-file limit is 256 (the case where, before the limits, every
// write failed until a restart) cost it no descriptor the store needs: the
// connections over three quarters of the limit are refused, puts that open
// new segment files all succeed, and once the idle connections go new ones
// are served again.
func TestIdleConnectionsUnderFileLimit(t *testing.T) {
	if os.Getenv(fdChildEnv) != "" {
		t.Skip("in the child")
	}
	_, line := testutil.StartChild(t, "TestFDLimitChild", fdChildEnv+"="+t.TempDir(), 60*time.Second)
	addr, limit, _ := strings.Cut(line, " LIMIT ")
	if want := fmt.Sprint(childFileLimit * 3 / 4); limit != want {
		t.Fatalf("child's connection limit %s, want %s", limit, want)
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	producer := dial(t, ta)

	var idle []net.Conn
	t.Cleanup(func() {
		for _, nc := range idle {
			nc.Close()
		}
	})
	for range 300 {
		nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		idle = append(idle, nc)
	}
	body := strings.Repeat("f", 1024)
	for i := range 200 {
		producer.sendCmd(putCmd("test", int32(i%2), body, int32(i)))
		if r := producer.result(); !r.OK() {
			t.Fatalf("put %d with 300 idle connections: %s", i, r)
		}
	}
	for _, nc := range idle {
		nc.Close()
	}
	idle = nil
	// Served again once the idle ones are gone.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		cl := dial(t, ta)
		if cl.version() == nil {
			cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 1 << 20, Opaque: 1})
			if _, ok := cl.read().(*wire.Value); !ok {
				t.Fatal("get after the idle connections went failed")
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatal("no connection served after the idle connections went")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
