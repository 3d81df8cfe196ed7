package georeplicator

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// waitLinked waits until the rig's receiver holds an established link.
func waitLinked(t *testing.T, g *rig) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !g.rc.Status().Connected {
			return errors.New("not connected")
		}
		return nil
	})
}

// TestControlRequest: a slave's request reaches the master's OnControl
// over a link the shared secret authenticates, and the answer comes back;
// over an unauthenticated link it is refused before OnControl runs (the
// error says how to fix it) unless the master opted in; a master that
// does not offer requests (as an older one) is never sent one.
func TestControlRequest(t *testing.T) {
	for _, c := range []struct {
		name        string
		secret      string
		allow       bool
		noHandler   bool
		wantBody    string
		wantErr     string
		wantHandled bool
	}{
		{name: "secret", secret: goodSecret, wantBody: "switchover to hf asked by g1/1 (secret)", wantHandled: true},
		{name: "unauthenticated refused", wantErr: "secretFile"},
		{name: "unauthenticated allowed", allow: true, wantBody: "switchover to hf asked by g1/1 (none)", wantHandled: true},
		{name: "master without requests", secret: goodSecret, noHandler: true, wantErr: "takes no requests"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, kinds()[0])
			g.shOpts.Secret, g.rcOpts.Secret = []byte(c.secret), []byte(c.secret)
			g.shOpts.AllowUnauthenticatedControl = c.allow
			var handled atomic.Bool
			if !c.noHandler {
				g.shOpts.OnControl = func(req *ControlRequest) {
					handled.Store(true)
					go req.Reply([]byte(req.Op+" to "+req.Args["to"]+" asked by "+req.From+" ("+req.Auth+")"), nil)
				}
			}
			g.startMaster()
			g.startSlave()
			waitLinked(t, g)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			body, err := g.rc.Control(ctx, "switchover", map[string]string{"to": "hf"})
			switch {
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("Control: %q %v, want an error naming %q", body, err, c.wantErr)
			case c.wantErr == "" && (err != nil || string(body) != c.wantBody):
				t.Fatalf("Control: %q %v, want %q", body, err, c.wantBody)
			case handled.Load() != c.wantHandled:
				t.Fatalf("OnControl called: %t, want %t", handled.Load(), c.wantHandled)
			}
			if c.noHandler && !errors.Is(err, ErrControlUnsupported) {
				t.Fatalf("Control: %v, want ErrControlUnsupported", err)
			}
			// The link outlives a refusal: replication goes on.
			g.load(5, defaultParts())
			g.waitConverged(10 * time.Second)
		})
	}
}

// TestControlReplyError: the master's failure reaches the slave as an
// error carrying its text.
func TestControlReplyError(t *testing.T) {
	g := newRig(t, kinds()[0])
	g.shOpts.Secret, g.rcOpts.Secret = []byte(goodSecret), []byte(goodSecret)
	g.shOpts.OnControl = func(req *ControlRequest) {
		go req.Reply(nil, errors.New("no connected slave matches"))
	}
	g.startMaster()
	g.startSlave()
	waitLinked(t, g)
	_, err := g.rc.Control(context.Background(), "switchover", map[string]string{"to": "nobody"})
	if err == nil || !strings.Contains(err.Error(), "no connected slave matches") {
		t.Fatalf("Control: %v", err)
	}
}

// TestHandshakeFeaturesOptional: hello and welcome without the features
// field (an older peer's) decode with none, and with it round-trip.
func TestHandshakeFeaturesOptional(t *testing.T) {
	h := hello{Version: protocolVersion, Group: "g", MasterLog: "log", Generation: 3, Features: slaveFeatures}
	b := h.encode()
	got, err := decodeHello(b)
	if err != nil || got.Features != slaveFeatures {
		t.Fatalf("hello round trip: %+v %v", got, err)
	}
	if got, err := decodeHello(b[:len(b)-4]); err != nil || got.Features != 0 || got.Generation != 3 {
		t.Fatalf("older hello: %+v %v", got, err)
	}
	w := welcome{Version: protocolVersion, LogID: "log", Generation: 3, Features: featureControl}
	wb := w.encode()
	if got, err := decodeWelcome(wb); err != nil || got.Features != featureControl {
		t.Fatalf("welcome round trip: %+v %v", got, err)
	}
	if got, err := decodeWelcome(wb[:len(wb)-4]); err != nil || got.Features != 0 || got.Generation != 3 {
		t.Fatalf("older welcome: %+v %v", got, err)
	}
}

// TestLagReportReachesSlave: a slave held back by a bandwidth cap gets its
// master's per-partition lag report: totals over every partition, the
// partitions behind listed with bytes and messages.
func TestLagReportReachesSlave(t *testing.T) {
	g := newRig(t, kinds()[0])
	g.load(400, defaultParts())
	g.rcOpts.BandwidthBytesPerSec = 20 << 10
	g.startMaster()
	g.startSlave()
	var rep LagReport
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		r, ok := g.rc.LastLagReport()
		if !ok || r.Bytes == 0 {
			return errors.New("no lag report showing lag yet")
		}
		rep = r
		return nil
	})
	var bytes, msgs int64
	for _, p := range rep.Partitions {
		if p.Bytes <= 0 || p.Messages <= 0 || p.Topic == "" {
			t.Fatalf("partition entry %+v", p)
		}
		bytes += p.Bytes
		msgs += p.Messages
	}
	if rep.Lagging != len(rep.Partitions) || bytes != rep.Bytes || msgs != rep.Messages || rep.Received.IsZero() {
		t.Fatalf("lag report %+v: partitions sum to %d bytes %d messages", rep, bytes, msgs)
	}
	for i := 1; i < len(rep.Partitions); i++ {
		if rep.Partitions[i].Bytes > rep.Partitions[i-1].Bytes {
			t.Fatalf("partitions not most bytes first: %+v", rep.Partitions)
		}
	}
}

// TestLagReportBounded: a report lists at most maxLagReportParts
// partitions but totals all of them.
func TestLagReportBounded(t *testing.T) {
	g := GroupLag{}
	for i := range maxLagReportParts + 10 {
		g.Partitions = append(g.Partitions, PartitionLag{Topic: "t", Partition: i, Bytes: int64(i + 1), Messages: 1})
		g.Bytes += int64(i + 1)
		g.Messages++
	}
	g.Partitions = append(g.Partitions, PartitionLag{Topic: "t", Partition: -1}) // caught up: left out
	rep, err := decodeLagReport(lagReportOf(g, time.Unix(1, 0)).encode())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Partitions) != maxLagReportParts || rep.Lagging != maxLagReportParts+10 || rep.Bytes != g.Bytes ||
		rep.Partitions[0].Bytes != int64(maxLagReportParts+10) {
		t.Fatalf("report: %d partitions, %d lagging, %d bytes, first %+v", len(rep.Partitions), rep.Lagging, rep.Bytes, rep.Partitions[0])
	}
}
