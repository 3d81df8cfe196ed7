package georeplicator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// captureHandler records every log record.
type captureHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *captureHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *captureHandler) WithGroup(string) slog.Handler            { return h }
func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}

// warnings returns the WARN records' attributes (and "msg").
func (h *captureHandler) warnings() []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if r.Level != slog.LevelWarn {
			continue
		}
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

func (h *captureHandler) debugs() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.records {
		if r.Level == slog.LevelDebug {
			n++
		}
	}
	return n
}

// TestSlaveSaysWhyOnce: a slave that cannot replicate warns once per
// distinct cause, naming the address it tried and what to change, and
// retries quietly (DEBUG) while the cause stays the same.
func TestSlaveSaysWhyOnce(t *testing.T) {
	// Nothing listens: a port that was free a moment ago.
	closedAddr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))

	// Something listens but never answers the handshake (a broker's port
	// that ignores binary frames behaves like this).
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	var held []net.Conn
	var heldMu sync.Mutex
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			heldMu.Lock()
			held = append(held, c)
			heldMu.Unlock()
		}
	}()
	defer func() {
		heldMu.Lock()
		for _, c := range held {
			c.Close()
		}
		heldMu.Unlock()
	}()

	// A master with another brokerId refuses the handshake.
	master := newMemStore()
	ship, err := NewShipper(ShipperOptions{Listen: "127.0.0.1:0", BrokerID: 7, Source: master})
	if err != nil {
		t.Fatal(err)
	}
	if err := ship.Start(); err != nil {
		t.Fatal(err)
	}
	defer ship.Close()

	for _, c := range []struct {
		name, addr, fix string
	}{
		{"no listener", closedAddr, "nothing listens"},
		{"not a replication listener", silent.Addr().String(), "serves no replication stream"},
		{"wrong brokerId", ship.Addr(), "brokerId in this slave's server.ini"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &captureHandler{}
			r, err := NewReceiver(ReceiverOptions{
				Sink: newMemStore(), Resolver: StaticResolver(c.addr), BrokerID: 3, SlaveID: 0,
				CheckpointFile: filepath.Join(t.TempDir(), "cp"), DialTimeout: 200 * time.Millisecond,
				BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond,
				Logger: slog.New(h),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(); err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				if r.Status().Reconnects < 5 {
					return fmt.Errorf("only %d attempts so far", r.Status().Reconnects)
				}
				return nil
			})
			r.Close()
			w := h.warnings()
			if len(w) != 1 {
				t.Fatalf("%d warnings after %d attempts, want 1: %v", len(w), r.Status().Reconnects, w)
			}
			if w[0]["addr"] != c.addr || !strings.Contains(w[0]["fix"], c.fix) || w[0]["err"] == "" {
				t.Errorf("warning = %v, want addr %s and a fix saying %q", w[0], c.addr, c.fix)
			}
			if h.debugs() == 0 {
				t.Error("repeats of the same cause are not logged at all")
			}
		})
	}
}
