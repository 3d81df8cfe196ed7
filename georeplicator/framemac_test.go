package georeplicator

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// relayMACLen is the MAC trailer the relay expects on frames after the
// handshake.
var relayMACLen = macLen

// readRawFrame reads one frame as it is on the wire: header, payload and,
// when mac, its MAC trailer.
func readRawFrame(r io.Reader, mac bool) ([]byte, error) {
	hb := make([]byte, headerLen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hb[20:]))
	if mac {
		n += relayMACLen
	}
	rest := make([]byte, n)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return append(hb, rest...), nil
}

// hostileRelay stands on the path between a slave and its master. It
// passes the genuine handshake through (hello, challenge, auth, proof) on
// the first connection and then tampers with what follows through attack;
// later connections pass untouched.
type hostileRelay struct {
	ln     net.Listener
	target string
	conns  atomic.Int32
	// attack runs on the first connection once both handshake frames of a
	// direction have passed: toMaster tells which direction it is given.
	attack func(toMaster bool, from io.Reader, to io.Writer) error
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   []net.Conn
}

func newHostileRelay(t *testing.T, target string, attack func(toMaster bool, from io.Reader, to io.Writer) error) *hostileRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostileRelay{ln: ln, target: target, attack: attack}
	h.wg.Add(1)
	go h.accept()
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		for _, c := range h.open {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	return h
}

func (h *hostileRelay) accept() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return
		}
		m, err := net.Dial("tcp", h.target)
		if err != nil {
			c.Close()
			continue
		}
		h.mu.Lock()
		h.open = append(h.open, c, m)
		h.mu.Unlock()
		first := h.conns.Add(1) == 1
		pump := func(from, to net.Conn, toMaster bool) {
			defer h.wg.Done()
			defer to.Close()
			defer from.Close()
			if !first {
				io.Copy(to, from)
				return
			}
			// hello then auth towards the master, challenge then proof
			// towards the slave: both without a MAC.
			for range 2 {
				f, err := readRawFrame(from, false)
				if err != nil {
					return
				}
				if _, err := to.Write(f); err != nil {
					return
				}
			}
			h.attack(toMaster, from, to)
		}
		h.wg.Add(2)
		go pump(c, m, true)
		go pump(m, c, false)
	}
}

func (h *hostileRelay) addr() string { return h.ln.Addr().String() }

// forward passes the frames of a direction on unchanged.
func forward(from io.Reader, to io.Writer) error {
	for {
		f, err := readRawFrame(from, true)
		if err != nil {
			return err
		}
		if _, err := to.Write(f); err != nil {
			return err
		}
	}
}

// TestInjectedFramesRefused: on a link authenticated by the shared secret,
// a relay that passed the genuine handshake through cannot insert a
// switchover request, replay a frame or reorder two: each is refused, the
// link is dropped with a log naming the cause, no request reaches
// OnControl, and the slave reconnects and replicates.
func TestInjectedFramesRefused(t *testing.T) {
	forgedSwitchover := func() []byte {
		var f []byte
		f, _ = writeFrame(io.Discard, header{typ: typeControl}, encodeControl(1, "switchover", map[string]string{"to": "gz"}), nil)
		mac := make([]byte, relayMACLen)
		rand.Read(mac)
		return append(f, mac...)
	}
	for _, c := range []struct {
		name   string
		attack func(toMaster bool, from io.Reader, to io.Writer) error
		// masterSees: the master drops the link (else the slave does).
		masterSees bool
	}{
		{"inserted switchover", func(toMaster bool, from io.Reader, to io.Writer) error {
			if toMaster {
				f, err := readRawFrame(from, true) // the first ack
				if err != nil {
					return err
				}
				to.Write(f)
				to.Write(forgedSwitchover())
			}
			return forward(from, to)
		}, true},
		{"replayed ack", func(toMaster bool, from io.Reader, to io.Writer) error {
			if toMaster {
				f, err := readRawFrame(from, true)
				if err != nil {
					return err
				}
				to.Write(f)
				to.Write(f)
			}
			return forward(from, to)
		}, true},
		{"reordered frames", func(toMaster bool, from io.Reader, to io.Writer) error {
			if !toMaster {
				a, err := readRawFrame(from, true) // welcome
				if err != nil {
					return err
				}
				b, err := readRawFrame(from, true) // a keepalive or data
				if err != nil {
					return err
				}
				to.Write(b)
				to.Write(a)
			}
			return forward(from, to)
		}, false},
		{"frame sent back", nil, false}, // built below: it needs both directions
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, kinds()[0])
			var mlog, slog testutil.SyncBuffer
			g.shOpts.Logger, g.rcOpts.Logger = mlog.Logger(), slog.Logger()
			g.shOpts.Secret, g.rcOpts.Secret = []byte(goodSecret), []byte(goodSecret)
			var handled atomic.Int32
			g.shOpts.OnControl = func(req *ControlRequest) {
				handled.Add(1)
				go req.Reply(nil, nil)
			}
			g.load(10, defaultParts())
			g.startMaster()
			attack := c.attack
			if attack == nil {
				// The slave's first ack, passed on, is also reflected to
				// the slave as if the master sent it.
				var mu sync.Mutex
				var ack []byte
				got := make(chan struct{})
				attack = func(toMaster bool, from io.Reader, to io.Writer) error {
					if toMaster {
						f, err := readRawFrame(from, true)
						if err != nil {
							return err
						}
						mu.Lock()
						ack = f
						mu.Unlock()
						close(got)
						to.Write(f)
						return forward(from, to)
					}
					f, err := readRawFrame(from, true) // welcome
					if err != nil {
						return err
					}
					to.Write(f)
					select {
					case <-got:
					case <-time.After(5 * time.Second):
					}
					mu.Lock()
					to.Write(ack)
					mu.Unlock()
					return forward(from, to)
				}
			}
			relay := newHostileRelay(t, g.sh.Addr(), attack)
			g.startSlaveAt(relay.addr())
			const cause = "does not carry the link's MAC"
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				if n := handled.Load(); n != 0 {
					t.Fatalf("%d control requests reached OnControl", n)
				}
				seen := mlog.String()
				if !c.masterSees {
					seen = slog.String()
				}
				if !strings.Contains(seen, cause) {
					return fmt.Errorf("no log names the refused frame (%q) yet", cause)
				}
				return nil
			})
			// The link was dropped: the slave came back on a new connection
			// and replicates.
			g.waitConverged(10 * time.Second)
			if n := relay.conns.Load(); n < 2 {
				t.Fatalf("%d connections through the relay: the tampered link was not dropped", n)
			}
			if n := handled.Load(); n != 0 {
				t.Fatalf("%d control requests reached OnControl", n)
			}
		})
	}
}

// TestFrameMACOlderPeers: the format is stated in the handshake, so a
// peer of the version that authenticates the handshake only is refused
// with an error that names it, on either side.
func TestFrameMACOlderPeers(t *testing.T) {
	t.Run("older slave", func(t *testing.T) {
		g := newRig(t, kinds()[0])
		var mlog testutil.SyncBuffer
		g.shOpts.Logger = mlog.Logger()
		g.shOpts.Secret = []byte(goodSecret)
		g.startMaster()
		c, err := net.Dial("tcp", g.sh.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		h := hello{Version: protocolVersion, BrokerID: 7, SlaveID: 9, Group: "old", Resume: -1, Window: minWindow,
			Features: featureControl | featureLagReport}
		hb := h.encode()
		writeFrame(c, header{typ: typeHello}, hb, nil)
		ch, err := readFrame(c, nil)
		if err != nil || ch.typ != typeChallenge {
			t.Fatalf("first frame type %d, err %v; want a challenge", ch.typ, err)
		}
		sn := make([]byte, nonceLen)
		writeFrame(c, header{typ: typeAuth}, append(sn, authMAC([]byte(goodSecret), slaveLabel, ch.wire, sn, hb)...), nil)
		f, err := readFrame(c, nil)
		if err != nil || f.typ != typeError || !strings.Contains(string(f.wire), "older version") {
			t.Fatalf("answer type %d %q, err %v; want a refusal naming the older version", f.typ, f.wire, err)
		}
		testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(mlog.String(), "upgrade the slave") {
				return fmt.Errorf("master log: %s", mlog.String())
			}
			return nil
		})
	})
	t.Run("older master", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					hf, err := readFrame(c, nil)
					if err != nil {
						return
					}
					mn := make([]byte, nonceLen)
					rand.Read(mn)
					writeFrame(c, header{typ: typeChallenge}, mn, nil)
					a, err := readFrame(c, nil)
					if err != nil || len(a.wire) != nonceLen+proofLen {
						return
					}
					// The proof of a master that authenticates the handshake only.
					writeFrame(c, header{typ: typeAuth}, authMAC([]byte(goodSecret), masterLabel, mn, a.wire[:nonceLen], hf.wire), nil)
					io.Copy(io.Discard, c)
				}()
			}
		}()
		g := newRig(t, kinds()[0])
		g.rcOpts.Secret = []byte(goodSecret)
		g.startSlaveAt(ln.Addr().String())
		testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			if st := g.rc.Status(); !strings.Contains(st.LastError, "older version that authenticates the handshake only") {
				return fmt.Errorf("slave status %+v", st)
			}
			return nil
		})
		if st := g.rc.Status(); st.Connected || st.Frames != 0 {
			t.Fatalf("slave linked to an older master: %+v", st)
		}
	})
}

// TestLastErrorClearedOnRecovery: a slave that lost its master shows why
// while it is cut off, and no error once it is linked again.
func TestLastErrorClearedOnRecovery(t *testing.T) {
	g := newRig(t, kinds()[0])
	g.load(5, defaultParts())
	g.startMaster()
	g.startSlave()
	g.waitConverged(10 * time.Second)
	g.stopMaster(false)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := g.rc.Status(); st.Connected || st.LastError == "" {
			return fmt.Errorf("slave status %+v, want disconnected with an error", st)
		}
		return nil
	})
	g.startMaster()
	g.load(5, defaultParts())
	g.waitConverged(10 * time.Second)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := g.rc.Status(); !st.Connected || st.LastError != "" {
			return fmt.Errorf("slave status %+v, want linked with no error", st)
		}
		return nil
	})
	for _, l := range g.rc.StatsLines() {
		if strings.HasPrefix(l, "last_error ") && l != "last_error -" {
			t.Fatalf("stats slave still shows %q", l)
		}
	}
}
