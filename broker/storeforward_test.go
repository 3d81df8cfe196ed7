package broker

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/outbox"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

const safSite = "[site]\nforwardPuts=true\nstoreAndForward=true"

// serveAsGatewayLinks accepts connections and serves each on b as a slave
// site's gateway link (ServeConn), as the bundle does once the link's
// handshake is done; it returns the address.
func serveAsGatewayLinks(t *testing.T, b *testBroker) string {
	t.Helper()
	return serveConns(t, func(nc net.Conn) { b.ServeConn(nc) })
}

func openOutbox(t *testing.T, dir string, o outbox.Options) *outbox.Outbox {
	t.Helper()
	o.Dir = dir
	ob, err := outbox.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

// masterBodies lists the bodies (and ids) the master holds in topic-p, in
// offset order.
func masterBodies(t *testing.T, b *testBroker, topic string, p int) ([]string, []int64) {
	t.Helper()
	var bodies []string
	var ids []int64
	end := partitionEnd(t, b, topic, p)
	for off := int64(0); off < end; {
		data, err := b.store.Read(topic, p, off, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := parseRecords(t, data)
		if len(recs) == 0 {
			break
		}
		for _, r := range recs {
			bodies = append(bodies, string(r.body))
			ids = append(ids, r.id)
			off += 20 + int64(len(r.body))
		}
	}
	return bodies, ids
}

// putLocally sends n puts to test-p through cl and checks each is
// answered accepted-locally with offset -1; it returns the ids given.
func putLocally(t *testing.T, cl *client, p int32, prefix string, from, n int) []int64 {
	t.Helper()
	var buf []byte
	for i := range n {
		buf = putCmd("test", p, fmt.Sprintf("%s-%03d", prefix, from+i), int32(from+i+1)).AppendTo(buf)
	}
	cl.send(buf)
	ids := make([]int64, n)
	for range n {
		r := cl.result()
		if r.Code != wire.StatusOK || !strings.HasSuffix(string(r.Body), " "+fmt.Sprint(p)+" -1 accepted-locally") {
			t.Fatalf("put %d: %s, want accepted locally", r.Opaque, r)
		}
		a, err := parsePutAnswer(r.Body)
		if err != nil || a.ID == 0 {
			t.Fatalf("answer %q: %v", r.Body, err)
		}
		ids[int(r.Opaque)-1-from] = a.ID
	}
	return ids
}

func wantBodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func waitOutboxEmpty(t *testing.T, g *Gateway) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if s, _ := g.OutboxStats(); s.Entries > 0 {
			return fmt.Errorf("outbox holds %d entries (%s)", s.Entries, s.DrainError)
		}
		return nil
	})
}

// TestStoreAndForwardThroughOutage: while the master cannot be reached,
// puts to a storeAndForward topic are answered accepted-locally (their id,
// partition, offset -1) and wait in the outbox, whose size and age show;
// once the master is back they are stored there in order, under the ids
// the producer was given, once each, and the outbox empties.
func TestStoreAndForwardThroughOutage(t *testing.T) {
	ob := openOutbox(t, t.TempDir(), outbox.Options{})
	master, slave, g, target := movingGateway(t, safSite, GatewayOptions{Outbox: ob})
	cl := dial(t, slave.Addr())
	const n = 50
	ids := putLocally(t, cl, 0, "out", 0, n)
	if s, ok := g.OutboxStats(); !ok || s.Entries != n || s.Bytes == 0 || s.OldestAge <= 0 {
		t.Fatalf("outbox during the outage: %+v", s)
	}
	// Why draining fails shows once the drain has tried (it may not have
	// yet when the last answer arrives).
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if s, _ := g.OutboxStats(); s.DrainError == "" {
			return fmt.Errorf("no drain error shown during the outage: %+v", s)
		}
		return nil
	})
	if got := partitionEnd(t, master, "test", 0); got > 0 {
		t.Fatalf("the master holds %d bytes during the outage", got)
	}
	target.Store(serveAsGatewayLinks(t, master))
	waitOutboxEmpty(t, g)
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if st := g.Stats(); st.Drained != n {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	bodies, gotIDs := masterBodies(t, master, "test", 0)
	if strings.Join(bodies, ",") != strings.Join(wantBodies("out", n), ",") {
		t.Fatalf("the master holds %v", bodies)
	}
	for i := range ids {
		if gotIDs[i] != ids[i] {
			t.Fatalf("put %d answered id %d, stored at the master as %d", i, ids[i], gotIDs[i])
		}
	}
	if st := g.Stats(); st.Accepted != n || st.Drained != n || st.Deduplicated != 0 {
		t.Fatalf("stats %+v", st)
	}
	if partitionEnd(t, slave, "test", 0) > 0 {
		t.Fatalf("the slave stored a put in its own log")
	}
}

// answerDropper relays connections to target, but on the first one
// passes back only the first answer: the master stores what the gateway sends and its
// answers never arrive (as when the master is killed right after storing).
type answerDropper struct {
	addr   string
	target string
	conns  atomic.Int32
}

func newAnswerDropper(t *testing.T, target string) *answerDropper {
	t.Helper()
	d := &answerDropper{target: target}
	d.addr = serveConns(t, func(nc net.Conn) {
		defer nc.Close()
		up, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		drop := d.conns.Add(1) == 1
		back := make(chan struct{})
		go func() {
			defer close(back)
			if drop {
				// The first answer (the gateway asks the master's end
				// before it sends) passes; the rest is dropped.
				buf := make([]byte, 4096)
				if n, err := up.Read(buf); err == nil {
					nc.Write(buf[:n])
				}
				io.Copy(io.Discard, up)
			} else {
				io.Copy(nc, up)
			}
			nc.Close()
		}()
		io.Copy(up, nc) // until nc closes: the gateway's, or the test's cleanup
		up.Close()
		<-back
	})
	return d
}

// TestStoreAndForwardRestartNoDuplicates: puts accepted while the master
// is away; the gateway then sends them and the master stores them, but no
// answer comes back; the gateway's broker is killed (its gateway and
// outbox closed, a torn record left at the outbox's end) and started
// again on the same outbox: every accepted put is at the master once, in
// order, under its id; those the master had are found there and not sent
// again.
func TestStoreAndForwardRestartNoDuplicates(t *testing.T) {
	dir := t.TempDir()
	ob := openOutbox(t, dir, outbox.Options{})
	master, slave, g, target := movingGateway(t, safSite, GatewayOptions{Outbox: ob})
	cl := dial(t, slave.Addr())
	const n = 40
	ids := putLocally(t, cl, 1, "rs", 0, n)
	links := serveAsGatewayLinks(t, master)
	drop := newAnswerDropper(t, links)
	target.Store(drop.addr)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if bodies, _ := masterBodies(t, master, "test", 1); len(bodies) < n {
			return fmt.Errorf("the master holds %d of %d", len(bodies), n)
		}
		return nil
	})
	if st := g.Stats(); st.Drained != 0 {
		t.Fatalf("confirmed without answers: %+v", st)
	}

	// kill -9: nothing of the outbox is buffered (each put was fsynced
	// before its answer); a record being written is torn.
	slave.SetGateway(nil)
	ob.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	f, err := os.OpenFile(segs[len(segs)-1], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte{0, 0, 1, 0, 9, 9})
	f.Close()

	ob2 := openOutbox(t, dir, outbox.Options{})
	if s := ob2.Stats(); s.Entries != n {
		t.Fatalf("after the restart the outbox holds %d entries, want %d", s.Entries, n)
	}
	target.Store(links)
	g2, err := slave.SetGateway(&GatewayOptions{Holder: "slave", Outbox: ob2, Master: target.find})
	if err != nil {
		t.Fatal(err)
	}
	// More puts after the restart go behind the recovered ones.
	ids = append(ids, putLocally(t, cl, 1, "rs", n, 5)...)
	waitOutboxEmpty(t, g2)
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if st := g2.Stats(); st.Drained != n+5 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	bodies, gotIDs := masterBodies(t, master, "test", 1)
	if strings.Join(bodies, ",") != strings.Join(wantBodies("rs", n+5), ",") {
		t.Fatalf("the master holds %d records: %v", len(bodies), bodies)
	}
	for i := range ids {
		if gotIDs[i] != ids[i] {
			t.Fatalf("put %d answered id %d, stored as %d", i, ids[i], gotIDs[i])
		}
	}
	if st := g2.Stats(); st.Deduplicated != n || st.Drained != n+5 {
		t.Fatalf("after the restart: %+v, want %d found at the master and %d drained", st, n, n+5)
	}
}

// TestStoreAndForwardMasterRestartMidDrain: the master is stopped while
// the gateway drains (some entries stored, some not, answers lost) and
// started again on its files: every entry is there once, in order.
func TestStoreAndForwardMasterRestartMidDrain(t *testing.T) {
	mdir := t.TempDir()
	mcfg := gatewayConfig(t, "[topic=other]\nnumPartitions=1")
	master := startBrokerDir(t, mcfg, mdir, nil)
	ob := openOutbox(t, t.TempDir(), outbox.Options{})
	_, slave, g, target := movingGateway(t, safSite, GatewayOptions{Outbox: ob, drainBatch: 100})
	cl := dial(t, slave.Addr())
	const n = 600 // several drain batches
	var ids []int64
	for i := 0; i < n; i += 100 {
		ids = append(ids, putLocally(t, cl, 0, "mr", i, 100)...)
	}
	target.Store(serveAsGatewayLinks(t, master))
	testutil.Eventually(t, 20*time.Second, time.Millisecond, func() error {
		if partitionEnd(t, master, "test", 0) <= 0 {
			return fmt.Errorf("nothing at the master yet")
		}
		return nil
	})
	master.Close()
	master.store.Close()
	target.Store("127.0.0.1:1")
	master = startBrokerDir(t, mcfg, mdir, nil)
	target.Store(serveAsGatewayLinks(t, master))
	waitOutboxEmpty(t, g)
	bodies, gotIDs := masterBodies(t, master, "test", 0)
	if strings.Join(bodies, ",") != strings.Join(wantBodies("mr", n), ",") {
		t.Fatalf("the master holds %d records, want %d in order", len(bodies), n)
	}
	for i := range ids {
		if gotIDs[i] != ids[i] {
			t.Fatalf("put %d answered id %d, stored as %d", i, ids[i], gotIDs[i])
		}
	}
	t.Logf("stats %+v", g.Stats())
}

// TestStoreAndForwardBounds: past outboxMaxBytes a put is refused 503
// naming the bound and is not stored; a forwarded topic without
// storeAndForward still waits for the master.
func TestStoreAndForwardBounds(t *testing.T) {
	ob := openOutbox(t, t.TempDir(), outbox.Options{MaxBytes: 300})
	_, slave, g, _ := gatewayPair(t, "[topic=other]\nstoreAndForward=false\n"+safSite, GatewayOptions{
		Outbox:  ob,
		MaxWait: 300 * time.Millisecond,
		Master:  func(context.Context) (string, error) { return "127.0.0.1:1", nil },
	})
	cl := dial(t, slave.Addr())
	putLocally(t, cl, 0, "b", 0, 5)
	cl.sendCmd(putCmd("test", 0, "one too many", 99))
	r := cl.result()
	if r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "outboxMaxBytes=300 reached") || !strings.Contains(string(r.Body), "not stored") {
		t.Fatalf("put past outboxMaxBytes: %s", r)
	}
	cl.sendCmd(putCmd("other", 0, "waits for the master", 100))
	if r := cl.result(); r.Code != wire.StatusServiceUnavailable || strings.Contains(string(r.Body), "outbox") {
		t.Fatalf("put to a forwarded topic without storeAndForward, master away: %s", r)
	}
	if s, _ := g.OutboxStats(); s.Entries != 5 {
		t.Fatalf("outbox %+v", s)
	}
	if st := g.Stats(); st.Refused != 1 || st.Accepted != 5 {
		t.Fatalf("stats %+v", st)
	}
}

// TestStoreAndForwardFailoverMidDrain: the gateway drains to master A,
// which stores every entry but whose answers are lost; A dies, and B,
// which replicated A's log (a copy of A's files), becomes the master: the
// gateway, now sending to B, finds the entries there by id and sends none
// twice; later puts follow them in order.
func TestStoreAndForwardFailoverMidDrain(t *testing.T) {
	adir := t.TempDir()
	mcfg := gatewayConfig(t, "[topic=other]\nnumPartitions=1")
	a := startBrokerDir(t, mcfg, adir, nil)
	ob := openOutbox(t, t.TempDir(), outbox.Options{})
	_, slave, g, target := movingGateway(t, safSite, GatewayOptions{Outbox: ob})
	// A holds records of other producers before.
	direct := dial(t, a.Addr())
	for i := range 3 {
		direct.sendCmd(putCmd("test", 0, fmt.Sprintf("direct-%d", i), int32(i+1)))
		if r := direct.result(); r.Code != wire.StatusOK {
			t.Fatal(r)
		}
	}
	cl := dial(t, slave.Addr())
	const n = 20
	ids := putLocally(t, cl, 0, "fo", 0, n)
	drop := newAnswerDropper(t, serveAsGatewayLinks(t, a))
	target.Store(drop.addr)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if bodies, _ := masterBodies(t, a, "test", 0); len(bodies) < 3+n {
			return fmt.Errorf("A holds %d of %d", len(bodies), 3+n)
		}
		return nil
	})
	target.Store("127.0.0.1:1")
	a.Close()
	a.store.Close()
	bdir := t.TempDir()
	if err := os.CopyFS(bdir, os.DirFS(adir)); err != nil {
		t.Fatal(err)
	}
	b := startBrokerDir(t, mcfg, bdir, nil)
	target.Store(serveAsGatewayLinks(t, b))
	ids = append(ids, putLocally(t, cl, 0, "fo", n, 4)...)
	waitOutboxEmpty(t, g)
	bodies, gotIDs := masterBodies(t, b, "test", 0)
	want := append([]string{"direct-0", "direct-1", "direct-2"}, wantBodies("fo", n+4)...)
	if strings.Join(bodies, ",") != strings.Join(want, ",") {
		t.Fatalf("the new master holds %v", bodies)
	}
	for i := range ids {
		if gotIDs[3+i] != ids[i] {
			t.Fatalf("put %d answered id %d, stored as %d", i, ids[i], gotIDs[3+i])
		}
	}
	if st := g.Stats(); st.Deduplicated != n {
		t.Fatalf("stats %+v, want the %d entries A stored found at B", st, n)
	}
}

// TestStoreAndForwardThroughSwitchoverHold: the gateway drains to a master
// that is handing over (its puts held, then passed on to the new master)
// and whose answers are lost; the old master goes and the gateway sends to
// the new master: the entries the hold passed on are there under the ids
// the producer was given, found by id and not sent again, each stored
// once. A hold without a gateway link to pass them on with their ids
// answers them 503, not stored.
func TestStoreAndForwardThroughSwitchoverHold(t *testing.T) {
	mcfg := gatewayConfig(t, "[topic=other]\nnumPartitions=1")
	nu := startBroker(t, mcfg, nil)
	nuLinks := serveAsGatewayLinks(t, nu)
	linkDial := func(ctx context.Context, addr string) (net.Conn, error) {
		if addr != nu.Addr().String() {
			return nil, fmt.Errorf("dial %s: not the new master", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", nuLinks) // the MetaQ port's gateway links
	}
	old := startBroker(t, mcfg, nil)
	old.RefuseWrites("switchover", Refusal{Reason: "handing over; retry", Retry: true})
	h, err := old.HoldWrites(HoldOptions{MaxWait: 10 * time.Second, Reason: "this master is handing over", Dial: linkDial})
	if err != nil {
		t.Fatal(err)
	}
	h.Forward(func(context.Context) (string, error) { return nu.Addr().String(), nil })

	ob := openOutbox(t, t.TempDir(), outbox.Options{})
	_, slave, g, target := movingGateway(t, safSite, GatewayOptions{Outbox: ob})
	cl := dial(t, slave.Addr())
	const n = 20
	ids := putLocally(t, cl, 0, "sw", 0, n)
	drop := newAnswerDropper(t, serveAsGatewayLinks(t, old))
	target.Store(drop.addr)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		if bodies, _ := masterBodies(t, nu, "test", 0); len(bodies) < n {
			return fmt.Errorf("the new master holds %d of %d", len(bodies), n)
		}
		return nil
	})
	// The hold counts a batch passed on once the new master's answer is
	// back, which may be after the records are readable there.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st := h.Stats(); st.Forwarded != n {
			return fmt.Errorf("hold: %+v, want %d passed on", st, n)
		}
		return nil
	})
	// The old master goes (demoted, restarted): its link breaks.
	target.Store(nuLinks)
	old.Close()
	ids = append(ids, putLocally(t, cl, 0, "sw", n, 3)...)
	waitOutboxEmpty(t, g)
	bodies, gotIDs := masterBodies(t, nu, "test", 0)
	if strings.Join(bodies, ",") != strings.Join(wantBodies("sw", n+3), ",") {
		t.Fatalf("the new master holds %d records, want %d once each in order: %v", len(bodies), n+3, bodies)
	}
	for i := range ids {
		if gotIDs[i] != ids[i] {
			t.Fatalf("put %d answered id %d, stored at the new master as %d", i, ids[i], gotIDs[i])
		}
	}
	if st := g.Stats(); st.Deduplicated != n {
		t.Fatalf("gateway: %+v, want the %d entries the hold passed on found at the new master", st, n)
	}

	// Without a gateway link a hold does not pass an entry on as a plain
	// put (a new id): 503, not stored.
	old2 := startBroker(t, mcfg, nil)
	old2.RefuseWrites("switchover", Refusal{Reason: "handing over; retry", Retry: true})
	h2, err := old2.HoldWrites(HoldOptions{MaxWait: 10 * time.Second, Reason: "this master is handing over"})
	if err != nil {
		t.Fatal(err)
	}
	h2.Forward(func(context.Context) (string, error) { return nu.Addr().String(), nil })
	la, err := net.ResolveTCPAddr("tcp", serveAsGatewayLinks(t, old2))
	if err != nil {
		t.Fatal(err)
	}
	link := dial(t, la)
	body := []byte("keeps-its-id")
	link.sendCmd(&wire.Sync{Topic: "test", Partition: 1, MsgID: ids[0] + 1000, Checksum: wire.Checksum(body), Opaque: 7, Body: body})
	if r := link.result(); r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not stored") {
		t.Fatalf("an entry held without a gateway link: %s, want 503 not stored", r)
	}
	if end := partitionEnd(t, nu, "test", 1); end > 0 {
		t.Fatalf("the new master stored %d bytes in test-1", end)
	}
}
