package txn

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

const crashChildEnv = "METAQ_TXN_CRASH_CHILD_DIR"

// TestCrashChild is the broker process the crash test kills. It runs only
// when the parent sets crashChildEnv: it serves on a free port, prints the
// address and waits to be killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashChildEnv)
	if dir == "" {
		t.Skip("child process of TestPreparedXASurvivesSIGKILL")
	}
	b := openSite(t, dir).brk
	fmt.Printf("ADDR %s\n", b.Addr())
	select {} // until SIGKILL
}

// startCrashChild runs TestCrashChild in a new process and returns its
// address and the command to kill.
func startCrashChild(t *testing.T, dir string) (*exec.Cmd, string) {
	t.Helper()
	return testutil.StartChild(t, "TestCrashChild", crashChildEnv+"="+dir, 30*time.Second)
}

func dialAddr(t *testing.T, addr string) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, d: wire.NewDecoder(bufio.NewReader(nc)), opaque: -2147483648}
}

// TestPreparedXASurvivesSIGKILL kills the broker process between PREPARE and
// COMMIT: after the restart RECOVER lists the transaction, COMMIT works and
// exactly its messages appear; a local transaction open at the kill is gone.
func TestPreparedXASurvivesSIGKILL(t *testing.T) {
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	cmd, addr := startCrashChild(t, dir)
	c := dialAddr(t, addr)
	const uq = "XAMessageProducer-crash"
	key := "XID:1:676c6f62616c39:6272616e636839:" + uq
	if r := c.tx(key, wire.TxBegin, uq); !r.OK() {
		t.Fatalf("begin: %d %s", r.Code, r.Body)
	}
	for _, b := range []string{"xa-1", "xa-2", "xa-3"} {
		if r := c.txPut(key, b); !r.OK() {
			t.Fatalf("put: %d %s", r.Code, r.Body)
		}
	}
	if r := c.tx(key, wire.TxPrepare, uq); !r.OK() || string(r.Body) != "0" {
		t.Fatalf("prepare: %d %s", r.Code, r.Body)
	}
	local := "TX:crash:1"
	if r := c.tx(local, wire.TxBegin, ""); !r.OK() {
		t.Fatalf("local begin: %d %s", r.Code, r.Body)
	}
	if r := c.txPut(local, "local-uncommitted"); !r.OK() {
		t.Fatalf("local put: %d %s", r.Code, r.Body)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	_, addr2 := startCrashChild(t, dir)
	c2 := dialAddr(t, addr2)
	if r := c2.tx("null", wire.TxRecover, uq); !r.OK() || string(r.Body) != key {
		t.Fatalf("recover after SIGKILL: %d %q", r.Code, r.Body)
	}
	if got := c2.bodies(); len(got) != 0 {
		t.Fatalf("messages visible before commit: %v", got)
	}
	if r := c2.tx(key, wire.TxCommitTwoPhase, uq); !r.OK() {
		t.Fatalf("commit after SIGKILL: %d %s", r.Code, r.Body)
	}
	got := c2.bodies()
	if len(got) != 3 || got[0] != "xa-1" || got[2] != "xa-3" {
		t.Fatalf("after commit = %v, want exactly the three XA messages", got)
	}
}
