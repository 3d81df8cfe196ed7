package broker

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/clock"
	"metaq/internal/testutil"
)

// TestSyncPair runs a synchronous master and its slave: an acknowledged
// put is on both with the same id and offset; with the slave gone the
// master refuses puts.
func TestSyncPair(t *testing.T) {
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) { o.SyncReceiver = true })
	master := startBroker(t, cfg, func(o *Options) {
		o.SyncSlave = slave.Addr().String()
		o.SyncTimeout = 2 * time.Second
	})
	mc := dial(t, master.Addr())
	sc := dial(t, slave.Addr())
	var ids []int64
	for i := range 5 {
		id, p, off := mustPut(t, mc, "test", 1, "msg-"+strconv.Itoa(i))
		if p != 1 || off != int64(i*25) {
			t.Fatalf("put %d: partition %d offset %d", i, p, off)
		}
		ids = append(ids, id)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids not rising: %v", ids)
		}
	}
	get := func(cl *client) []byte {
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 1, Offset: 0, MaxSize: 1 << 20, Opaque: 9})
		v, ok := cl.read().(*wire.Value)
		if !ok {
			t.Fatal("get did not answer value")
		}
		return v.Data
	}
	md, sd := get(mc), get(sc)
	if string(md) != string(sd) {
		t.Fatalf("master and slave differ:\n%x\n%x", md, sd)
	}
	recs, _ := parseRecords(t, md)
	if len(recs) != 5 || recs[4].id != ids[4] || string(recs[4].body) != "msg-4" {
		t.Fatalf("records %v", recs)
	}

	// Slave closed partition: the master does not acknowledge.
	if err := slave.ClosePartitions("test", 1, 1); err != nil {
		t.Fatal(err)
	}
	mc.sendCmd(putCmd("test", 1, "refused", 2))
	if r := mc.result(); r.Code != 500 || !strings.Contains(string(r.Body), "[slave 'meta://"+slave.Addr().String()+"'] [partition 'test-1'] failed") {
		t.Fatalf("put with slave partition closed: %s", r)
	}
	slave.OpenPartitions("test", 1, 1)

	// Slave gone.
	slave.Close()
	mc.sendCmd(putCmd("test", 0, "x", 3))
	r := mc.result()
	if r.Code != 500 {
		t.Fatalf("put without slave: %s", r)
	}
	mc.sendCmd(putCmd("test", 0, "y", 4))
	if r := mc.result(); r.Code != 500 || string(r.Body) != "Slave is disconnected " {
		t.Fatalf("put without slave: %q", r.Body)
	}
}

// TestSyncChecksAndIDs covers the slave side: checksum, unknown topic,
// wrong partition, and the stored id is the master's.
func TestSyncChecksAndIDs(t *testing.T) {
	slave := startBroker(t, vectorConfig(t), func(o *Options) { o.SyncReceiver = true })
	cl := dial(t, slave.Addr())
	for _, c := range []struct {
		cmd  *wire.Sync
		code int
		tail string
	}{
		{&wire.Sync{Topic: "test", Partition: 0, MsgID: 42, Checksum: 1, Body: []byte("a"), Opaque: 1}, 500, "Checksum failure,message may be corrupted when transfering on networking."},
		{&wire.Sync{Topic: "nosuch", Partition: 0, MsgID: 42, Checksum: -1, Body: []byte("a"), Opaque: 2}, 500, "The server do not accept topic nosuch"},
		{&wire.Sync{Topic: "test", Partition: 2, MsgID: 42, Checksum: -1, Body: []byte("a"), Opaque: 3}, 500, "wrong partition 2"},
		{&wire.Sync{Topic: "test", Partition: 0, MsgID: 42, Checksum: wire.Checksum([]byte("a")), Body: []byte("a"), Opaque: 4}, 200, "42 0 0"},
	} {
		cl.sendCmd(c.cmd)
		r := cl.result()
		if r.Code != c.code || !strings.HasSuffix(string(r.Body), c.tail) {
			t.Fatalf("sync %d: %s", c.cmd.Opaque, r)
		}
	}
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100, Opaque: 5})
	recs, _ := parseRecords(t, cl.read().(*wire.Value).Data)
	if len(recs) != 1 || recs[0].id != 42 {
		t.Fatalf("records %v", recs)
	}
}

func TestIDGen(t *testing.T) {
	fc := clock.NewFake(time.UnixMilli(idEpoch + 1000))
	g := idGen{brokerID: 5, clock: fc}
	a := g.next()
	if a != 1000<<22|5<<12 {
		t.Fatalf("first id %x", a)
	}
	prev := a
	for range 5000 {
		id := g.next()
		if id <= prev {
			t.Fatalf("id %x not above %x", id, prev)
		}
		prev = id
	}
	fc.Advance(-time.Second) // a clock step back keeps ids rising
	if id := g.next(); id <= prev {
		t.Fatalf("after a step back: %x <= %x", id, prev)
	}
}

// TestSyncPipelinedInOrder: syncs pipelined on one connection are stored in
// the order sent, per partition (MetaQ's ordered executor).
func TestSyncPipelinedInOrder(t *testing.T) {
	slave := startBroker(t, vectorConfig(t), func(o *Options) { o.SyncReceiver = true })
	cl := dial(t, slave.Addr())
	const n = 300
	var buf []byte
	for i := range n {
		body := []byte("m" + strconv.Itoa(1000+i))
		buf = (&wire.Sync{Topic: "test", Partition: int32(i % 2), MsgID: int64(1000 + i), Checksum: wire.Checksum(body), Body: body, Opaque: int32(i)}).AppendTo(buf)
	}
	cl.send(buf)
	for range n {
		r := cl.result()
		f := strings.Split(string(r.Body), " ")
		if !r.OK() || len(f) != 3 {
			t.Fatalf("sync %d: %s", r.Opaque, r)
		}
		i := int(r.Opaque)
		if want := strconv.Itoa((i / 2) * 25); f[0] != strconv.Itoa(1000+i) || f[2] != want {
			t.Fatalf("sync %d answered %q, want id %d offset %s", i, r.Body, 1000+i, want)
		}
	}
}

// TestSyncMasterLeavesZooKeeper: after SyncFailureThreshold failed syncs in
// a row the master unregisters, probes the slave with the status topic and
// registers again when it answers.
func TestSyncMasterLeavesZooKeeper(t *testing.T) {
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) { o.SyncReceiver = true })
	reg := &fakeRegistry{}
	master := startBroker(t, cfg, func(o *Options) {
		o.SyncSlave = slave.Addr().String()
		o.Registry = reg
		o.SyncFailureThreshold = 3
		o.SyncProbeInterval = 20 * time.Millisecond
	})
	mc := dial(t, master.Addr())
	mustPut(t, mc, "test", 0, "ok")
	if err := slave.ClosePartitions("test", 0, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mc.sendCmd(putCmd("test", 0, "x", int32(i)))
		if r := mc.result(); r.Code != 500 {
			t.Fatalf("put %d: %s", i, r)
		}
	}
	// The probe uses _metaq_slave_status_test, which the slave accepts: the
	// master registers again.
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		reg.mu.Lock()
		defer reg.mu.Unlock()
		if reg.unreg != 1 || reg.brokers != 2 {
			return fmt.Errorf("unregister %d register %d", reg.unreg, reg.brokers)
		}
		return nil
	})
	if n, ok := reg.topic("test"); !ok || n != 2 {
		t.Fatalf("topic not registered again: %d %v", n, ok)
	}
	// Closed partition on a sync master: MetaQ's bare text.
	if err := master.ClosePartitions("test", 1, 1); err != nil {
		t.Fatal(err)
	}
	mc.sendCmd(putCmd("test", 1, "x", 9))
	if r := mc.result(); r.Code != 403 || string(r.Body) != "Partition[0-1] has been closed" {
		t.Fatalf("closed on sync master: %s", r)
	}
}

// TestSyncPairPipelined: puts pipelined on one connection to a sync master
// are replicated a batch at a time with their syncs pipelined; both sides
// end with the same bytes, and each partition's offsets follow the order
// sent.
func TestSyncPairPipelined(t *testing.T) {
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) { o.SyncReceiver = true })
	master := startBroker(t, cfg, func(o *Options) { o.SyncSlave = slave.Addr().String() })
	mc := dial(t, master.Addr())
	const n = 300
	var buf []byte
	for i := range n {
		buf = putCmd("test", int32(i%2), fmt.Sprintf("m%04d", i), int32(i)).AppendTo(buf)
	}
	mc.send(buf)
	offs := map[int32]int64{}
	for range n {
		r := mc.result()
		if !r.OK() {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		f := strings.Fields(string(r.Body))
		off, _ := strconv.ParseInt(f[2], 10, 64)
		offs[r.Opaque] = off
	}
	for i := 2; i < n; i++ {
		if offs[int32(i)] <= offs[int32(i-2)] {
			t.Fatalf("put %d at offset %d, not after put %d at %d", i, offs[int32(i)], i-2, offs[int32(i-2)])
		}
	}
	for p := range 2 {
		md, err := master.store.Read("test", p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		sd, err := slave.store.Read("test", p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if string(md) != string(sd) {
			t.Fatalf("partition %d: master %d bytes, slave %d bytes", p, len(md), len(sd))
		}
		recs, _ := parseRecords(t, md)
		if len(recs) != n/2 {
			t.Fatalf("partition %d holds %d records", p, len(recs))
		}
	}
}

// TestSamsaCommitIsOneUnit: on a synchronous (samsa) master a
// transaction's commit (StoreValidatedGroup, two partitions) is sent to
// the slave whole and stored as one unit, its outcome decided by one wait
// for all of the slave's answers: the master's log holds every commit as
// one unit (so its own slave sites receive it whole, see
// store.Store.AppendUnitAsync), and with plain puts to the same
// partitions running at the same time, master and slave hold the same
// records (ids and offsets) in each partition, and the slave's log holds
// every commit as one unit as well (a sync unit).
func TestSamsaCommitIsOneUnit(t *testing.T) {
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) { o.SyncReceiver = true })
	master := startBroker(t, cfg, func(o *Options) {
		o.SyncSlave = slave.Addr().String()
		o.SyncTimeout = 5 * time.Second
	})
	const commits = 20
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for i := range commits {
			tag := "c" + strconv.Itoa(i)
			outs, err := master.StoreValidatedGroup(context.Background(), []store.PartitionAppend{
				{Topic: "test", Partition: 0, Msgs: []store.Message{{Body: []byte(tag + "-a")}, {Body: []byte(tag + "-b")}}},
				{Topic: "test", Partition: 1, Msgs: []store.Message{{Body: []byte(tag + "-c")}}},
			})
			if err == nil && (outs[0].Err != nil || outs[1].Err != nil) {
				err = fmt.Errorf("%v; %v", outs[0].Err, outs[1].Err)
			}
			if err != nil {
				errc <- fmt.Errorf("commit %d: %w", i, err)
				return
			}
		}
	}()
	mc := dial(t, master.Addr())
	for i := range 40 {
		mustPut(t, mc, "test", int32(i%2), "plain-"+strconv.Itoa(i))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	sc := dial(t, slave.Addr())
	get := func(cl *client, p int32) []byte {
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: p, Offset: 0, MaxSize: 1 << 20, Opaque: 9})
		v, ok := cl.read().(*wire.Value)
		if !ok {
			t.Fatal("get did not answer value")
		}
		return v.Data
	}
	for p := range int32(2) {
		md, sd := get(mc, p), get(sc, p)
		if !bytes.Equal(md, sd) {
			t.Fatalf("partition %d: master and slave differ (%d and %d bytes)", p, len(md), len(sd))
		}
		recs, _ := parseRecords(t, md)
		if want := 20 + commits*(2-int(p)); len(recs) != want {
			t.Fatalf("partition %d holds %d records, want %d", p, len(recs), want)
		}
	}

	// Read in the smallest pieces ReadLog gives (what a shipper may put
	// in one frame): a commit's two partitions are in one piece.
	units := 0
	pos, durable := master.store.LogBounds()
	for pos < durable {
		ents, next, err := master.store.ReadLog(pos, 1)
		if err != nil {
			t.Fatal(err)
		}
		var commitParts []int
		for _, e := range ents {
			recs, _ := parseRecords(t, e.Records)
			if len(recs) > 0 && bytes.HasPrefix(recs[0].body, []byte("c")) {
				commitParts = append(commitParts, e.Partition)
			}
			if e.Unit == 2 {
				units++
			}
		}
		if len(commitParts) == 1 {
			t.Fatalf("a piece of the master's log at %d holds a commit's partition %d alone: half a commit", pos, commitParts[0])
		}
		pos = next
	}
	if units != commits {
		t.Fatalf("the master's log holds %d of the %d commits as one unit", units, commits)
	}
	// The slave took each commit as one sync unit and holds it as one unit
	// too: all or none of it, whenever the master or the link dies.
	if units := logUnits(t, slave); units != commits {
		t.Fatalf("the slave's log holds %d of the %d commits as one unit", units, commits)
	}
}
