package broker

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// TestWriteGate: while a holder refuses writes, plain puts (pipelined,
// partition -1 included) and in-process stores get the refusal in MetaQ's
// put failure text and nothing is stored; a retriable refusal answers 503,
// a final one wins over it (403); syncs from a samsa master still pass;
// writes are accepted again once every holder withdrew.
func TestWriteGate(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.SyncReceiver = true })
	cl := dial(t, brk.Addr())
	if r := brk.WriteRefusal(); r != nil {
		t.Fatalf("refusal before any holder: %+v", r)
	}
	brk.RefuseWrites("slave", Refusal{Reason: "this broker is a slave of meta://master:8123"})
	var buf []byte
	for i, p := range []int32{0, 1, -1} {
		buf = putCmd("test", p, "stray", int32(i+1)).AppendTo(buf)
	}
	cl.send(buf)
	for range 3 {
		r := cl.result()
		if r.Code != wire.StatusForbidden || !strings.HasPrefix(string(r.Body), "Put message to [broker '"+brk.URL()+"'] [partition 'test-") ||
			!strings.HasSuffix(string(r.Body), "] failed.Detail:this broker is a slave of meta://master:8123") {
			t.Fatalf("put %d to a refusing broker: %s", r.Opaque, r)
		}
	}
	_, err := brk.StoreValidated(context.Background(), "test", 0, []store.Message{{Body: []byte("tx")}})
	var ref *Refusal
	if !errors.As(err, &ref) || ref.Reason != "this broker is a slave of meta://master:8123" {
		t.Fatalf("StoreValidated while refusing: %v", err)
	}
	// A sync slave still stores its master's records.
	body := []byte("from the master")
	cl.sendCmd(&wire.Sync{Topic: "test", Partition: 1, MsgID: 77, Checksum: wire.Checksum(body), Body: body, Opaque: 9})
	if r := cl.result(); !r.OK() || string(r.Body) != "77 1 0" {
		t.Fatalf("sync while refusing client writes: %s", r)
	}

	brk.RefuseWrites("failover", Refusal{Reason: "switching over", Retry: true})
	cl.sendCmd(putCmd("test", 0, "stray", 10))
	if r := cl.result(); r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "slave of") {
		t.Fatalf("a final refusal must win over a retriable one: %s", r)
	}
	brk.AllowWrites("slave")
	cl.sendCmd(putCmd("test", 0, "stray", 11))
	if r := cl.result(); r.Code != wire.StatusServiceUnavailable || !strings.HasSuffix(string(r.Body), "failed.Detail:switching over") {
		t.Fatalf("retriable refusal: %s", r)
	}
	if partitionEnd(t, brk, "test", 0) != -1 {
		t.Fatal("a refused put was stored")
	}
	brk.AllowWrites("failover")
	brk.AllowWrites("nobody") // withdrawing twice or for an unknown holder is harmless
	if r := brk.WriteRefusal(); r != nil {
		t.Fatalf("refusal after every holder withdrew: %+v", r)
	}
	if _, _, off := mustPut(t, cl, "test", 0, "accepted"); off != 0 {
		t.Fatalf("first accepted put at offset %d", off)
	}
	if _, err := brk.StoreValidated(context.Background(), "test", 0, []store.Message{{Body: []byte("tx")}}); err != nil {
		t.Fatalf("StoreValidated: %v", err)
	}
}

// TestUpdateRefusal: UpdateRefusal rewrites a refusal in place, and never
// brings back one that was withdrawn.
func TestUpdateRefusal(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	if brk.UpdateRefusal("replica", Refusal{Reason: "slave of a"}) || brk.WriteRefusal() != nil {
		t.Fatal("UpdateRefusal refused writes for a holder that refused none")
	}
	brk.RefuseWrites("replica", Refusal{Reason: "slave of a"})
	if !brk.UpdateRefusal("replica", Refusal{Reason: "slave of b"}) {
		t.Fatal("UpdateRefusal did not update a refusal in place")
	}
	if r := brk.WriteRefusal(); r == nil || r.Reason != "slave of b" {
		t.Fatalf("refusal after the update: %+v", r)
	}
	brk.AllowWrites("replica")
	if brk.UpdateRefusal("replica", Refusal{Reason: "slave of c"}) || brk.WriteRefusal() != nil {
		t.Fatalf("UpdateRefusal brought back a withdrawn refusal: %+v", brk.WriteRefusal())
	}
}

// TestStoreValidatedGroup: a group of several partitions' batches is
// refused as a whole while writes are refused (ErrNotStored, nothing
// stored), stored as a whole otherwise, and when writes begin to be
// refused between its gate check and its hand-off to the store it is
// stored but reported with ErrWritesStopped: a switchover may have handed
// the new master a log that ends before it.
func TestStoreValidatedGroup(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	group := func(tag string) []store.PartitionAppend {
		return []store.PartitionAppend{
			{Topic: "test", Partition: 0, Msgs: []store.Message{{Body: []byte(tag + "-a")}, {Body: []byte(tag + "-b")}}},
			{Topic: "test", Partition: 1, Msgs: []store.Message{{Body: []byte(tag + "-c")}}},
		}
	}
	brk.RefuseWrites("failover", Refusal{Reason: "switching over", Retry: true})
	outs, err := brk.StoreValidatedGroup(context.Background(), group("refused"))
	var ref *Refusal
	if !errors.Is(err, ErrNotStored) || !errors.As(err, &ref) || ref.Reason != "switching over" || outs != nil {
		t.Fatalf("group while refusing: %v %v", outs, err)
	}
	if partitionEnd(t, brk, "test", 0) != -1 || partitionEnd(t, brk, "test", 1) != -1 {
		t.Fatal("a refused group was stored")
	}
	brk.AllowWrites("failover")

	outs, err = brk.StoreValidatedGroup(context.Background(), group("stored"))
	if err != nil || len(outs) != 2 || outs[0].Err != nil || outs[1].Err != nil || len(outs[0].Appended) != 2 || len(outs[1].Appended) != 1 {
		t.Fatalf("group: %+v %v", outs, err)
	}
	end0, end1 := partitionEnd(t, brk, "test", 0), partitionEnd(t, brk, "test", 1)
	if end0 <= 0 || end1 <= 0 {
		t.Fatalf("group stored: partition ends %d %d", end0, end1)
	}

	brk.gatePassedHook = func() { brk.RefuseWrites("failover", Refusal{Reason: "switching over", Retry: true}) }
	outs, err = brk.StoreValidatedGroup(context.Background(), group("stopped"))
	brk.gatePassedHook = nil
	if !errors.Is(err, ErrWritesStopped) || errors.Is(err, ErrNotStored) || !strings.Contains(err.Error(), "switching over") {
		t.Fatalf("group whose writes stopped on the way: %v", err)
	}
	if len(outs) != 2 || outs[0].Err != nil || outs[1].Err != nil {
		t.Fatalf("group whose writes stopped on the way: outcomes %+v", outs)
	}
	if e0, e1 := partitionEnd(t, brk, "test", 0), partitionEnd(t, brk, "test", 1); e0 <= end0 || e1 <= end1 {
		t.Fatalf("group whose writes stopped on the way was not stored: ends %d %d, before %d %d", e0, e1, end0, end1)
	}
}

// TestPutRefusedOnItsWayToTheStore: a plain put checks the write gate when
// it is read and reaches the store later; a switchover or a fence that
// stops writes in between must not leave it acknowledged. Injected at the
// two places it can happen: (1) the put passed the gate and the refusal
// comes as it reaches the store (inside the store call, as a switchover
// refuses writes and flushes the log to hand its end to the new master):
// the put lands past that end and is answered 500, outcome unknown, never
// 200; (2) the put passed the gate and waits for its topic's registration
// while writes are stopped: it is refused with the refusal (503) and not
// stored. Puts after writes are allowed again are stored and answered 200.
func TestPutRefusedOnItsWayToTheStore(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=late]\nnumPartitions=1\n"))
	reg, arm, release := stallingRegistry("late")
	var armed atomic.Bool
	var brk *testBroker
	var handedEnd atomic.Int64
	handedEnd.Store(-2)
	brk = startBroker(t, cfg, func(o *Options) {
		o.Registry = reg
		o.Store = &hookStore{Store: o.Store, append: func(topic string) error {
			if topic == "test" && armed.CompareAndSwap(true, false) {
				// What a switchover does: refuse, flush, hand the
				// log's end to the new master.
				brk.RefuseWrites("switchover", Refusal{Reason: "this master is handing over to hf; retry", Retry: true})
				if err := brk.store.Flush(); err != nil {
					return err
				}
				handedEnd.Store(partitionEnd(t, brk, "test", 0))
			}
			return nil
		}}
	})
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "before")

	// (1) The refusal comes between the gate and the store.
	armed.Store(true)
	cl.sendCmd(putCmd("test", 0, "on its way", 7))
	r := cl.result()
	if armed.Load() {
		t.Fatal("the put never reached the store")
	}
	if end := partitionEnd(t, brk, "test", 0); end <= handedEnd.Load() {
		t.Fatalf("the put was not stored past the handed-over end %d (end %d)", handedEnd.Load(), end)
	}
	if r.OK() {
		t.Fatalf("a put stored past the end a switchover handed over was acknowledged: %s", r)
	}
	if r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), "unknown") || !strings.Contains(string(r.Body), "handing over to hf") {
		t.Fatalf("a put whose writes were stopped on its way: %s", r)
	}
	brk.AllowWrites("switchover")
	mustPut(t, cl, "test", 0, "after")

	// (2) The refusal comes while the put waits for its topic's
	// registration, after it passed the gate.
	arm()
	cl.sendCmd(putCmd("late", 0, "waits", 8))
	cl.expectSilence(100 * time.Millisecond)
	brk.RefuseWrites("failover", Refusal{Reason: "fenced by a newer master; retry", Retry: true})
	close(release)
	r = cl.result()
	if r.OK() || r.Code != wire.StatusServiceUnavailable || !strings.HasSuffix(string(r.Body), "failed.Detail:fenced by a newer master; retry") {
		t.Fatalf("a put that passed the gate before writes were stopped and waited: %s", r)
	}
	if end := partitionEnd(t, brk, "late", 0); end != -1 {
		t.Fatalf("a put refused on its way was stored: partition end %d", end)
	}
	brk.AllowWrites("failover")
	if _, _, off := mustPut(t, cl, "late", 0, "accepted"); off != 0 {
		t.Fatalf("first accepted put to late at offset %d", off)
	}
}
