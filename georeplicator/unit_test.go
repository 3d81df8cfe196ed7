package georeplicator

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"metaq/broker/store"
)

// TestCommitShippedWhole: a transaction's commit spans two partitions and
// is written as one unit (store.Store.AppendUnitAsync, the broker's
// StoreValidatedGroup); each partition's entry alone fills a frame. The
// stream is stopped right after the first frame the slave applies (the
// receiver's apply hook holds it there, as a master killed at that moment
// would): the slave must hold both partitions' records or neither, since
// a slave promoted then would otherwise serve half a commit. Once the
// stream goes on, both are replicated.
func TestCommitShippedWhole(t *testing.T) {
	k := kinds()[0] // the file store: units are its ReadLog's
	g := newRig(t, k)
	st := g.master.(*store.Store)
	body := make([]byte, 80<<10) // above FrameBytes (64 KiB), incompressible
	rand.Read(body)
	commit := []store.PartitionAppend{
		{Topic: "tx", Partition: 0, Msgs: []store.Message{{Body: body}}},
		{Topic: "tx", Partition: 1, Msgs: []store.Message{{Body: body}}},
	}
	got := make(chan []store.AppendOutcome, 1)
	st.AppendUnitAsync(context.Background(), commit, func(o []store.AppendOutcome) { got <- o })
	for i, o := range <-got {
		if o.Err != nil {
			t.Fatalf("commit partition %d: %v", i, o.Err)
		}
	}

	first := make(chan struct{})
	release := make(chan struct{})
	frames := 0
	g.rcOpts.applyHook = func(store.LogEntry, time.Time) {
		frames++
		if frames == 1 {
			close(first)
			<-release // the master is gone: nothing more arrives
		}
	}
	g.startMaster()
	g.startSlave()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("no frame applied")
	}
	held := func(p int) int64 {
		info, err := g.slave.Partition("tx", p)
		if err != nil {
			return 0
		}
		return info.Written - info.Min
	}
	a, b := held(0), held(1)
	close(release)
	if (a == 0) != (b == 0) {
		t.Fatalf("after the first frame the slave holds %d bytes of the commit's partition 0 and %d of partition 1: half a commit", a, b)
	}
	if a == 0 {
		t.Fatal("the first frame held none of the commit")
	}
	g.waitConverged(10 * time.Second)
}
