package bundle

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"

	"metaq/broker/wire"
)

// TestSwitchoverNewMasterTakesPutsBeforeItRegisters: a switchover's new
// master opens its writes before ZooKeeper names it (the old master passes
// its held puts on then, and forwarding slaves and view producers reach it
// at once). A put that reaches it then must be acknowledged as the master
// it becomes, not refused as the slave it was.
//
// In deploy/'s layout by hand (two bundles per site, MetaQ 1.4.6's Java
// producers on bj's root and hf's view), three of four switchovers had a
// send answered "this site is a slave; retry" by the new master: its role
// became master only after it registered in ZooKeeper, and the write check
// (siterole.MayAcknowledge) refused a slave without holding the put. The
// hook pauses hf's promotion in that window and sends one put straight to
// hf's MetaQ port.
func TestSwitchoverNewMasterTakesPutsBeforeItRegisters(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	hf := s.site("hf")
	answer := putBeforeRegistration(t, s, "hf", hf.Broker.Addr().String(), []byte("put before registration"))
	if !answer.OK() {
		t.Fatalf("put to hf after it took puts and before it registered: answered %d %q, want acknowledged", answer.Code, answer.Body)
	}
	s.produce("hf", "orders", 5)
	s.converged("orders")
}

// putBeforeRegistration switches bj over to to and, while to's promotion
// waits before it registers in ZooKeeper, sends one put of body to
// orders-0 at addr on a connection of its own; it returns the answer.
func putBeforeRegistration(t *testing.T, s *sites, to, addr string, body []byte) *wire.Result {
	t.Helper()
	var answer *wire.Result
	var putErr error
	hook := func() {
		answer, putErr = putOnce(addr, &wire.Put{Topic: "orders", Partition: 0, Checksum: wire.Checksum(body), Body: body, Opaque: 7})
	}
	site := s.site(to)
	site.failover.beforeRegister.Store(&hook)
	s.switchover("bj", to)
	site.failover.beforeRegister.Store(nil)
	if putErr != nil {
		t.Fatalf("put to %s while %s took over: %v", addr, to, putErr)
	}
	if answer == nil {
		t.Fatalf("%s's promotion did not reach its registration (the hook did not run)", to)
	}
	return answer
}

// putOnce sends one put on a connection of its own and returns the answer.
func putOnce(addr string, p *wire.Put) (*wire.Result, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	if err := nc.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return nil, err
	}
	if _, err := nc.Write(p.AppendTo(nil)); err != nil {
		return nil, fmt.Errorf("write put to %s: %w", addr, err)
	}
	resp, err := wire.NewDecoder(bufio.NewReader(nc)).Decode()
	if err != nil {
		return nil, fmt.Errorf("read the put's answer from %s: %w", addr, err)
	}
	r, ok := resp.(*wire.Result)
	if !ok {
		return nil, fmt.Errorf("answer from %s is a %s, not a result", addr, resp.Name())
	}
	return r, nil
}
