package georeplicator

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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

	checkFirstFrameWhole(t, g)
}

// checkFirstFrameWhole starts g's shipper and slave and stops the stream
// right after the first frame the slave applies (the receiver's apply hook
// holds it there, as a master killed at that moment would): the slave must
// hold both of the commit's partitions of topic tx or neither. Then the
// stream goes on and both are replicated.
func checkFirstFrameWhole(t *testing.T, g *rig) {
	t.Helper()
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

const unitChildEnv = "METAQ_GR_UNIT_CHILD_DIR"

// TestUnitCommitChild is the master process TestCommitShippedWholeAfterMasterKill
// kills: it runs only when the parent sets unitChildEnv, opens the store
// there, stores a commit of two partitions as one unit, says so once it is
// durable and waits to be killed.
func TestUnitCommitChild(t *testing.T) {
	dir := os.Getenv(unitChildEnv)
	if dir == "" {
		t.Skip("child process of TestCommitShippedWholeAfterMasterKill")
	}
	st, err := store.Open(store.Options{Dir: dir, SegmentBytes: fileSegmentBytes})
	if err != nil {
		t.Fatal(err)
	}
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
	fmt.Println("COMMITTED")
	select {} // until SIGKILL
}

// TestCommitShippedWholeAfterMasterKill: the master process stores a
// commit of two partitions (each entry alone fills a frame) as one unit
// and is killed (SIGKILL) before anything is shipped; its store is opened
// again by a new process (recovery, no clean close) and only then does a
// slave connect. The first frame the slave applies must hold both
// partitions or neither, as when the master had not restarted: the
// commit's bounds are in the master's log, not in the memory of the
// process that wrote it.
func TestCommitShippedWholeAfterMasterKill(t *testing.T) {
	k := kinds()[0] // the file store
	g := newRig(t, k)
	k.close(g.master)
	dir := filepath.Join(g.dir, "master")
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnitCommitChild$", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), unitChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	committed := make(chan struct{})
	go func() { // ends when the child's stdout closes
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "COMMITTED" {
				close(committed)
			}
		}
	}()
	select {
	case <-committed:
	case <-time.After(60 * time.Second):
		t.Fatal("the child master did not commit")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	g.master = k.open(t, dir)
	checkFirstFrameWhole(t, g)
}

// TestPromotedSlaveShipsUnitsWhole: a slave applies a commit its master
// shipped as one unit and keeps it one unit in its own log, so once it
// is a master (its store the source of a shipper of its own) it ships the
// commit whole to a slave of its own: that slave's first frame holds both
// partitions or neither.
func TestPromotedSlaveShipsUnitsWhole(t *testing.T) {
	k := kinds()[0] // the file store
	g := newRig(t, k)
	st := g.master.(*store.Store)
	body := make([]byte, 80<<10)
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
	g.startMaster()
	g.startSlave()
	g.waitConverged(10 * time.Second)
	g.stopSlave(false)
	g.sh.Close()
	g.sh = nil

	// The slave's store becomes the source of a master of its own.
	g2 := newRig(t, k)
	k.close(g2.master)
	g2.master, g.slave = g.slave, nil
	checkFirstFrameWhole(t, g2)
}

// TestResumeByEndsKeepsCommitWhole: a slave resumed by its partition ends
// (here a store that holds data and has no checkpoint, as a former master
// rejoining; the same path serves a slave that followed another master)
// lacks a commit of two partitions that the master wrote as one unit. The
// master starts its stream at the lowest log position covering the
// slave's ends: the first of the commit's entries, which lies inside the
// unit, after its unit entry. The commit must still arrive in one frame
// (each partition's entry alone fills a frame), or a master lost after
// the first frame leaves the slave with half a commit.
func TestResumeByEndsKeepsCommitWhole(t *testing.T) {
	k := kinds()[0] // the file store: units are its ReadLog's
	g := newRig(t, k)
	g.shOpts.LogID = "master-log"
	id, err := OpenIdentity(filepath.Join(g.dir, "slave-data", "replication.identity"))
	if err != nil {
		t.Fatal(err)
	}
	g.rcOpts.Identity = id
	g.put("tx", 0, []byte("before the commit, partition 0"))
	g.put("tx", 1, []byte("before the commit, partition 1"))
	g.startMaster()
	g.startSlave()
	g.waitConverged(10 * time.Second)
	g.stopSlave(false)
	// Without its checkpoint the slave is resumed by partition ends.
	if err := os.Remove(g.rcOpts.CheckpointFile); err != nil {
		t.Fatal(err)
	}

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
	g.mu.Lock()
	g.sent[pkey{"tx", 0}]++
	g.sent[pkey{"tx", 1}]++
	g.mu.Unlock()
	held := func(p int) int64 {
		info, err := g.slave.Partition("tx", p)
		if err != nil {
			t.Fatal(err)
		}
		return info.Written
	}
	a0, b0 := held(0), held(1)

	first := make(chan struct{})
	release := make(chan struct{})
	entries := 0
	g.rcOpts.applyHook = func(store.LogEntry, time.Time) {
		entries++
		if entries == 1 { // called after the whole first frame is applied
			close(first)
			<-release // the master is gone: nothing more arrives
		}
	}
	g.startSlave()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("no frame applied")
	}
	a, b := held(0)-a0, held(1)-b0
	close(release)
	if (a == 0) != (b == 0) {
		t.Fatalf("after the first frame of a resume by partition ends the slave holds %d bytes of the commit's partition 0 and %d of partition 1: half a commit", a, b)
	}
	g.waitConverged(10 * time.Second)
}
