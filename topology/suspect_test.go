package topology

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"metaq/internal/testutil"
)

// pausableTransport is memberlist's network transport with a switch: while
// paused the member neither sends nor receives (packets are dropped, stream
// connections refused), as a process that hangs or a network that drops
// its traffic, without leaving the pool.
type pausableTransport struct {
	*memberlist.NetTransport
	paused  atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
	quit    chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
}

func newPausableTransport(t *testing.T) *pausableTransport {
	t.Helper()
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{"127.0.0.1"}, BindPort: 0})
	if err != nil {
		t.Fatal(err)
	}
	p := &pausableTransport{NetTransport: nt, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn), quit: make(chan struct{})}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case pkt := <-nt.PacketCh():
				if p.paused.Load() {
					continue
				}
				select {
				case p.packets <- pkt:
				case <-p.quit:
					return
				}
			case <-p.quit:
				return
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		for {
			select {
			case c := <-nt.StreamCh():
				if p.paused.Load() {
					c.Close()
					continue
				}
				select {
				case p.streams <- c:
				case <-p.quit:
					c.Close()
					return
				}
			case <-p.quit:
				return
			}
		}
	}()
	return p
}

func (p *pausableTransport) PacketCh() <-chan *memberlist.Packet { return p.packets }
func (p *pausableTransport) StreamCh() <-chan net.Conn           { return p.streams }

func (p *pausableTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if p.paused.Load() {
		return time.Now(), nil // lost on the way
	}
	return p.NetTransport.WriteTo(b, addr)
}

func (p *pausableTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if p.paused.Load() {
		return nil, errors.New("paused")
	}
	return p.NetTransport.DialTimeout(addr, timeout)
}

func (p *pausableTransport) Shutdown() error {
	err := p.NetTransport.Shutdown()
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
	return err
}

// TestSuspectRefuted pauses a member's transport until the survivor
// suspects it, then resumes it before the suspicion times out: the survivor
// delivers NodeSuspect and SiteSuspect, then NodeUp and SiteUp, and never
// NodeDown.
func TestSuspectRefuted(t *testing.T) {
	timing := FastTiming()
	// Long suspicion (2 s with two members) so the member can answer again
	// before it would be declared down.
	timing.SuspicionMult, timing.SuspicionMaxTimeoutMult = 20, 1
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123"})
	tr := newPausableTransport(t)
	hf, err := New(Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Key: testKey, Label: "metaq-test", Timing: timing, RefreshInterval: 50 * time.Millisecond,
		Logger: testLogger(t), transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer hf.close(false)
	if _, err := hf.Join(t.Context(), bj.t.Addr()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return wantAlive(bj.t, "bj-1-m", "hf-1-s0") })
	events, cancel := bj.t.Subscribe(1024)
	defer cancel()

	tr.paused.Store(true)
	var order []string
	next := func(deadline <-chan time.Time) (Event, bool) {
		for {
			select {
			case ev := <-events:
				if ev.Site == "hf" && ev.Kind != NodeUpdate {
					order = append(order, ev.Kind.String())
					return ev, true
				}
			case <-deadline:
				return Event{}, false
			}
		}
	}
	ev, ok := next(time.After(5 * time.Second))
	if !ok || ev.Kind != NodeSuspect || ev.Member.Name != "hf-1-s0" || ev.Member.State != StateSuspect {
		t.Fatalf("first event for the paused member: %v (events %v)", ev, order)
	}
	if m, _ := memberOf(bj.t, "hf-1-s0"); m.State != StateSuspect && m.State != StateAlive {
		t.Fatalf("member table has hf %v while suspect", m.State)
	}
	tr.paused.Store(false)

	deadline := time.After(10 * time.Second)
	for !(contains(order, "node-up") && contains(order, "site-up")) {
		if _, ok := next(deadline); !ok {
			t.Fatalf("events for hf after resuming: %v", order)
		}
	}
	// Nothing more: the suspicion was refuted, not followed by down.
	quiet := time.After(3 * time.Second)
	for {
		if _, ok := next(quiet); !ok {
			break
		}
	}
	want := []string{"node-suspect", "site-suspect", "node-up", "site-up"}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("events for hf %v, want %v", order, want)
	}
	if err := wantAlive(bj.t, "hf-1-s0"); err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
