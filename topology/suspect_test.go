package topology

import (
	"errors"
	"log/slog"
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

// WriteToAddress and DialAddressTimeout are what memberlist calls on a
// transport that has them (NetTransport does): without these the pause
// would leave the member's own probes and pushes going out.
func (p *pausableTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if p.paused.Load() {
		return time.Now(), nil
	}
	return p.NetTransport.WriteToAddress(b, a)
}

func (p *pausableTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if p.paused.Load() {
		return nil, errors.New("paused")
	}
	return p.NetTransport.DialAddressTimeout(a, timeout)
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
//
// On a loaded machine a later probe of the resumed member can miss its
// 50 ms ack and start a new suspicion, which the member refutes in turn:
// the survivor then delivers the same four events again. That is the
// behaviour under test repeated, so any number of whole refuted rounds
// passes; a NodeDown, a round out of order or a member left suspect fails.
func TestSuspectRefuted(t *testing.T) {
	timing := FastTiming()
	// Long suspicion (2 s with two members) so the member can answer again
	// before it would be declared down. It is the suspecting member's
	// timing that counts (bj's), and the paused member's for its own
	// suspicion of bj while it hears nothing.
	timing.SuspicionMult, timing.SuspicionMaxTimeoutMult = 20, 1
	bj := startNode(t, Options{Site: "bj", Role: RoleMaster, BrokerID: 1, ServeURL: "meta://127.0.0.1:18123", Timing: timing})
	tr := newPausableTransport(t)
	hf, err := New(Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 0, ServeURL: "meta://127.0.0.1:28123",
		Key: testKey, Label: "metaq-test", Timing: timing, RefreshInterval: 50 * time.Millisecond,
		Logger: testutil.Logger(t, slog.LevelInfo), transport: tr})
	if err != nil {
		t.Fatal(err)
	}
	// Subscribed before hf joins, bj's events for hf are the whole story:
	// hf's arrival, then suspicions and their refutations.
	events, cancel := bj.t.Subscribe(1024)
	defer cancel()
	if err := hf.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer hf.close(false)
	if _, err := hf.Join(t.Context(), bj.t.Addr()); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return wantAlive(bj.t, "bj-1-m", "hf-1-s0") })

	var order []string
	last := func() string {
		if len(order) == 0 {
			return ""
		}
		return order[len(order)-1]
	}
	// readUntil reads bj's events for hf until stop says so or within has
	// passed (then it returns false).
	readUntil := func(stop func() bool, within time.Duration) bool {
		deadline := time.After(within)
		for !stop() {
			select {
			case ev := <-events:
				if ev.Site == "hf" && ev.Kind != NodeUpdate {
					order = append(order, ev.Kind.String())
				}
			case <-deadline:
				return false
			}
		}
		return true
	}
	lastIs := func(kind string) func() bool { return func() bool { return last() == kind } }
	never := func() bool { return false }

	// The pause makes bj suspect hf (a loaded machine may have made it do
	// so a moment before; either way hf is suspect and must refute it).
	tr.paused.Store(true)
	if !readUntil(lastIs("site-suspect"), 5*time.Second) {
		t.Fatalf("events for hf while paused: %v", order)
	}
	if m, _ := memberOf(bj.t, "hf-1-s0"); m.State != StateSuspect && m.State != StateAlive {
		t.Fatalf("member table has hf %v while suspect", m.State)
	}
	tr.paused.Store(false)
	if !readUntil(lastIs("site-up"), 10*time.Second) {
		t.Fatalf("events for hf after resuming: %v", order)
	}
	// Nothing but refuted suspicions follows: never down. A round still
	// open when the quiet time ends gets time to finish.
	readUntil(never, 3*time.Second)
	readUntil(lastIs("site-up"), 10*time.Second)

	joined := []string{"node-up", "site-up"}
	round := []string{"node-suspect", "site-suspect", "node-up", "site-up"}
	ok := len(order) >= len(joined)+len(round) && (len(order)-len(joined))%len(round) == 0
	for i := 0; ok && i < len(order); i++ {
		if i < len(joined) {
			ok = order[i] == joined[i]
		} else {
			ok = order[i] == round[(i-len(joined))%len(round)]
		}
	}
	if !ok {
		t.Fatalf("events for hf %v, want %v then %v (once, or repeated while the machine is loaded)", order, joined, round)
	}
	if rounds := (len(order) - len(joined)) / len(round); rounds > 1 {
		t.Logf("hf was suspected and refuted %d times (probes missed on a loaded machine)", rounds)
	}
	if err := wantAlive(bj.t, "hf-1-s0"); err != nil {
		t.Fatal(err)
	}
}
