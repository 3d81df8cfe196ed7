package georeplicator

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// safPutAll sends n puts to partition 0 of logs at hf (addr) on one
// connection, pipelined, and returns the ids they were accepted locally
// under.
func safPutAll(t *testing.T, addr, prefix string, n int) []int64 {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var buf []byte
	for i := range n {
		body := fmt.Appendf(nil, "%s-%03d %s", prefix, i, gwLogLine(0, i))
		buf = (&wire.Put{Topic: "logs", Partition: 0, Checksum: wire.Checksum(body), Opaque: int32(i + 1), Body: body}).AppendTo(buf)
	}
	if _, err := nc.Write(buf); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	dec := wire.NewDecoder(bufio.NewReader(nc))
	ids := make([]int64, 0, n)
	for range n {
		cmd, err := dec.Decode()
		if err != nil {
			t.Fatal(err)
		}
		r, ok := cmd.(*wire.Result)
		if !ok || r.Code != wire.StatusOK || !strings.HasSuffix(string(r.Body), "accepted-locally") {
			t.Fatalf("put answered %v, want accepted locally", cmd)
		}
		id, err := strconv.ParseInt(strings.Fields(string(r.Body))[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestGatewayLinkLateFramesNotApplied: hf's outbox drain sends entries on
// a gateway link whose bytes the path holds (a black hole for that
// connection only); hf gives up on it (no answer within DrainWait), opens
// a new link, reconciles, sends the entries again and bj confirms them.
// Then the path delivers what it held on the old link. bj must not store
// those entries a second time: the new link, naming the same gateway
// with a later epoch, superseded the old one at bj.
func TestGatewayLinkLateFramesNotApplied(t *testing.T) {
	g := newGatewayRig(t, 0, true, func(o *broker.GatewayOptions) { o.DrainWait = 500 * time.Millisecond })
	drained := func() error {
		if s := g.ob.Stats(); s.Entries != 0 {
			return fmt.Errorf("outbox holds %d entries", s.Entries)
		}
		return nil
	}
	ids := safPutAll(t, g.hf.Addr().String(), "before", 5)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, drained)
	dials := g.gw.Stats().Dials

	release := g.gateway.HoldOpen() // the link in use now: its bytes stop
	ids = append(ids, safPutAll(t, g.hf.Addr().String(), "held", 20)...)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, drained)
	if d := g.gw.Stats().Dials; d <= dials {
		t.Fatalf("the outbox drained without a new link (dials %d, before %d): the old link's bytes were not held", d, dials)
	}
	release()
	// The held bytes are delivered (or refused) and the old link is gone at
	// both ends: only the new link is open at bj.
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if n := g.gateway.Conns(); n != 1 {
			return fmt.Errorf("%d connections through the path", n)
		}
		if n := g.bj.Resources().Connections; n != 1 {
			return fmt.Errorf("%d connections at bj", n)
		}
		return nil
	})
	atBJ, records := bjRecords(t, g.bjStore)
	for _, id := range ids {
		switch n := len(atBJ[id]); {
		case n == 0:
			t.Errorf("id %d accepted at hf, not at bj", id)
		case n > 1:
			t.Errorf("id %d stored %d times at bj", id, n)
		}
	}
	if records != len(ids) {
		t.Errorf("bj holds %d records, %d puts were accepted", records, len(ids))
	}
}
