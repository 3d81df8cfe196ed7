package topology

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"metaq/internal/testutil"
)

// TestDropToCutsAndHeals: two members whose DropTo names each other's
// address stop hearing each other (each declares the other down); once
// DropTo lets them through, the rejoin loop brings them together again. A member started with DropTo on port 0
// advertises the port it bound.
func TestDropToCutsAndHeals(t *testing.T) {
	// Two members only: a third one would relay memberlist's indirect
	// probes around the cut and keep each side alive for the other (a CI
	// run waited 20 s for a down that never came).
	var cut atomic.Bool
	var hfAddr, gzAddr atomic.Value
	hfAddr.Store("")
	gzAddr.Store("")
	hf := startNode(t, Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 1, ServeURL: "meta://127.0.0.1:28123",
		DropTo: func(addr string) bool { return cut.Load() && addr == gzAddr.Load() }})
	hfAddr.Store(hf.t.Addr())
	gz := startNode(t, Options{Site: "gz", Role: RoleSlave, BrokerID: 1, SlaveID: 2, ServeURL: "meta://127.0.0.1:38123",
		Join: []string{hf.t.Addr()}, DropTo: func(addr string) bool { return cut.Load() && addr == hfAddr.Load() }})
	gzAddr.Store(gz.t.Addr())
	if hf.t.Addr() == "127.0.0.1:0" || gz.t.Addr() == "127.0.0.1:0" {
		t.Fatalf("members with DropTo advertise %s and %s, not the ports they bound", hf.t.Addr(), gz.t.Addr())
	}
	all := []string{"hf-1-s1", "gz-1-s2"}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		for _, n := range []*node{hf, gz} {
			if err := wantAlive(n.t, all...); err != nil {
				return err
			}
		}
		return nil
	})
	cut.Store(true)
	down := func(tp *Topology, name string) error {
		if m, ok := memberOf(tp, name); !ok || m.State != StateDown {
			return fmt.Errorf("%s sees %s as %v", tp.Name(), name, m.State)
		}
		return nil
	}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if err := down(hf.t, "gz-1-s2"); err != nil {
			return err
		}
		return down(gz.t, "hf-1-s1")
	})
	cut.Store(false)
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if err := wantAlive(hf.t, "gz-1-s2"); err != nil {
			return err
		}
		return wantAlive(gz.t, "hf-1-s1")
	})
}

// TestOpenRetryingInUseRetriesTakenPorts: a transport whose port is taken
// (the race of binding TCP and UDP to one kernel-picked number) is opened
// again until it opens or the tries are spent; any other error is
// returned at once.
func TestOpenRetryingInUseRetriesTakenPorts(t *testing.T) {
	port := holdTCPAndUDP(t)
	calls := 0
	taken := func() (*memberlist.NetTransport, error) {
		calls++
		return memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{"127.0.0.1"}, BindPort: port})
	}
	_, inUse := openRetryingInUse(3, taken)
	if inUse == nil || !strings.Contains(inUse.Error(), "address already in use") {
		t.Fatalf("3 tries on a taken port: err %v, want address already in use", inUse)
	}
	if calls != 3 {
		t.Fatalf("3 tries on a taken port opened %d times", calls)
	}

	// Taken twice (memberlist's own error), then free.
	calls = 0
	nt, err := openRetryingInUse(autoBindTries, func() (*memberlist.NetTransport, error) {
		if calls++; calls < 3 {
			return nil, inUse
		}
		return memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}})
	})
	if err != nil {
		t.Fatalf("port free at the third try: %v", err)
	}
	nt.Shutdown()
	if calls != 3 {
		t.Fatalf("opened %d times, want 3", calls)
	}

	calls = 0
	bad := func() (*memberlist.NetTransport, error) {
		calls++
		// An address this machine does not have (TEST-NET-3): binding
		// fails with "cannot assign requested address"; nothing is sent.
		return memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"203.0.113.1"}, BindPort: 0})
	}
	if nt, err := openRetryingInUse(autoBindTries, bad); err == nil || calls != 1 {
		if nt != nil {
			nt.Shutdown()
		}
		t.Fatalf("a bad address: err %v after %d opens, want an error after 1", err, calls)
	}
}

// holdTCPAndUDP binds a TCP and a UDP socket on one port of 127.0.0.1
// until the test ends, and returns the port.
func holdTCPAndUDP(t *testing.T) int {
	t.Helper()
	for range 100 {
		tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := tl.Addr().(*net.TCPAddr).Port
		ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			tl.Close()
			continue
		}
		t.Cleanup(func() { tl.Close(); ul.Close() })
		return port
	}
	t.Fatal("no port free for both TCP and UDP in 100 tries")
	return 0
}
