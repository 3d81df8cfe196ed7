package outbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func entries(k Key, from, n int) []Entry {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Key: k, ID: int64(1000 + from + i), Flag: 7, Body: []byte(fmt.Sprintf("body-%04d", from+i))}
	}
	return es
}

func mustOpen(t *testing.T, o Options) *Outbox {
	t.Helper()
	ob, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ob.Close() })
	return ob
}

func bodies(es []Entry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = string(e.Body)
	}
	return out
}

// TestRecoverTornTail: entries whose Append returned survive a reopen in
// order with their ids; garbage after them (a torn write) is cut off and
// later appends follow them; confirmed entries do not come back.
func TestRecoverTornTail(t *testing.T) {
	dir := t.TempDir()
	k := Key{Topic: "orders", Partition: 1}
	ob := mustOpen(t, Options{Dir: dir, SegmentBytes: 200})
	for i := 0; i < 10; i += 2 {
		if err := ob.Append(entries(k, i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := ob.Confirm(k, 3, 555); err != nil {
		t.Fatal(err)
	}
	ob.Close() // nothing is buffered: each Append was fsynced
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	last := segs[len(segs)-1]
	f, err := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	// A torn record: a header promising more than follows.
	f.Write([]byte{0, 0, 0, 90, 1, 2, 3, 4, 5, 6})
	f.Close()

	ob = mustOpen(t, Options{Dir: dir, SegmentBytes: 200})
	got := ob.Pending(k, 100, 1<<20)
	want := []string{"body-0003", "body-0004", "body-0005", "body-0006", "body-0007", "body-0008", "body-0009"}
	if strings.Join(bodies(got), ",") != strings.Join(want, ",") {
		t.Fatalf("after reopen: %v, want %v", bodies(got), want)
	}
	if got[0].ID != 1003 || got[0].Seq != 4 || got[0].Flag != 7 {
		t.Fatalf("first pending entry %+v", got[0])
	}
	if c, ok := ob.Cursor(k); !ok || c.Seq != 3 || c.Offset != 555 {
		t.Fatalf("cursor %+v %v", c, ok)
	}
	if err := ob.Append(entries(k, 10, 1)); err != nil {
		t.Fatal(err)
	}
	ob.Close()
	ob = mustOpen(t, Options{Dir: dir, SegmentBytes: 200})
	got = ob.Pending(k, 100, 1<<20)
	if len(got) != 8 || string(got[7].Body) != "body-0010" || got[7].Seq != 11 {
		t.Fatalf("after an append past the torn tail: %v", bodies(got))
	}
	if st := ob.Stats(); st.Entries != 8 || st.Oldest.IsZero() {
		t.Fatalf("stats %+v", st)
	}
}

// TestConfirmRemovesSegments: once every entry of a segment is confirmed
// the segment is removed; other partitions' pending entries keep theirs.
func TestConfirmRemovesSegments(t *testing.T) {
	dir := t.TempDir()
	a, b := Key{"t", 0}, Key{"t", 1}
	ob := mustOpen(t, Options{Dir: dir, SegmentBytes: 100})
	for i := range 6 {
		if err := ob.Append(append(entries(a, i, 1), entries(b, i, 1)...)); err != nil {
			t.Fatal(err)
		}
	}
	files := func() int {
		segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		return len(segs)
	}
	n := files()
	if n < 3 {
		t.Fatalf("%d segments, want several", n)
	}
	if err := ob.Confirm(a, 12, 1); err != nil {
		t.Fatal(err)
	}
	if files() != n {
		t.Fatalf("segments removed while b's entries are pending in them")
	}
	if err := ob.Confirm(b, 12, 1); err != nil {
		t.Fatal(err)
	}
	if files() != 1 {
		t.Fatalf("%d segments left with nothing pending, want the newest only", files())
	}
	if st := ob.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBounds: past MaxBytes, or with the oldest entry older than MaxAge,
// Append refuses with a BoundError naming the bound, and accepts again
// once entries are confirmed.
func TestBounds(t *testing.T) {
	now := time.Unix(1e9, 0)
	k := Key{"t", 0}
	one := entries(k, 0, 1)[0].Size()
	ob := mustOpen(t, Options{Dir: t.TempDir(), MaxBytes: 3 * one, MaxAge: time.Minute, Now: func() time.Time { return now }})
	if err := ob.Append(entries(k, 0, 3)); err != nil {
		t.Fatal(err)
	}
	var be *BoundError
	if err := ob.Append(entries(k, 3, 1)); !errors.As(err, &be) || be.Bound != "outboxMaxBytes" {
		t.Fatalf("append past MaxBytes: %v", err)
	}
	if err := ob.Confirm(k, 2, 0); err != nil {
		t.Fatal(err)
	}
	if err := ob.Append(entries(k, 3, 1)); err != nil {
		t.Fatalf("append after confirming: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if err := ob.Append(entries(k, 4, 1)); !errors.As(err, &be) || be.Bound != "outboxMaxAge" || !strings.Contains(err.Error(), "outboxMaxAge") {
		t.Fatalf("append with the oldest entry past MaxAge: %v", err)
	}
	if got := bodies(ob.Pending(k, 10, 1<<20)); strings.Join(got, ",") != "body-0002,body-0003" {
		t.Fatalf("pending %v", got)
	}
}

// TestDamagedOlderSegment: a bad record in an older segment quarantines
// that segment (renamed .bad); the newer segments' entries are kept.
func TestDamagedOlderSegment(t *testing.T) {
	dir := t.TempDir()
	k := Key{"t", 0}
	ob := mustOpen(t, Options{Dir: dir, SegmentBytes: 40})
	for i := range 3 {
		if err := ob.Append(entries(k, i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	ob.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(segs) != 3 {
		t.Fatalf("%d segments", len(segs))
	}
	data, _ := os.ReadFile(segs[0])
	data[len(data)-1] ^= 0xFF
	os.WriteFile(segs[0], data, 0o644)
	ob = mustOpen(t, Options{Dir: dir, SegmentBytes: 40})
	if got := bodies(ob.Pending(k, 10, 1<<20)); strings.Join(got, ",") != "body-0001,body-0002" {
		t.Fatalf("pending %v", got)
	}
	if _, err := os.Stat(segs[0] + ".bad"); err != nil {
		t.Fatalf("damaged segment not quarantined: %v", err)
	}
}

// TestConcurrentAppends: appends from many goroutines (sharing fsyncs)
// across segment rolls are all pending once they return, in each
// goroutine's order, and all come back after a reopen.
func TestConcurrentAppends(t *testing.T) {
	dir := t.TempDir()
	ob := mustOpen(t, Options{Dir: dir, SegmentBytes: 2000})
	const writers, each = 8, 40
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := Key{"t", w}
			for i := range each {
				if err := ob.Append(entries(k, i, 1)); err != nil {
					t.Error(err)
					return
				}
				if got := ob.Pending(k, each, 1<<20); len(got) != i+1 {
					t.Errorf("writer %d: %d pending after append %d returned", w, len(got), i+1)
					return
				}
			}
		}()
	}
	wg.Wait()
	ob.Close()
	ob = mustOpen(t, Options{Dir: dir, SegmentBytes: 2000})
	for w := range writers {
		got := bodies(ob.Pending(Key{"t", w}, 1000, 1<<20))
		if strings.Join(got, ",") != strings.Join(bodies(entries(Key{}, 0, each)), ",") {
			t.Fatalf("writer %d after reopen: %v", w, got)
		}
	}
}

// TestAppendAcrossARollSyncsItsSegment: group commit across a segment
// roll. An Append wrote to a segment and has not fsynced yet when another
// writes to the next one (the first rolled): the second's fsync covers
// nothing of the first segment, so it fsyncs that one too before it
// returns; entries are pending for the gateway only once fsynced, and the
// first Append returns once its segment is.
func TestAppendAcrossARollSyncsItsSegment(t *testing.T) {
	k := Key{"orders", 0}
	ob := mustOpen(t, Options{Dir: t.TempDir(), SegmentBytes: 1}) // every Append rolls
	var mu sync.Mutex
	var fsynced []string
	ob.syncHook = func(name string) {
		mu.Lock()
		fsynced = append(fsynced, filepath.Base(name))
		mu.Unlock()
	}
	synced := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(fsynced)
	}
	written, release := make(chan struct{}), make(chan struct{})
	var hooked atomic.Bool
	ob.writeHook = func() {
		if hooked.CompareAndSwap(false, true) { // the first Append only
			close(written)
			<-release
		}
	}
	done := make(chan error, 1)
	go func() { done <- ob.Append(entries(k, 0, 1)) }()
	<-written
	if err := ob.Append(entries(k, 1, 1)); err != nil {
		t.Fatal(err)
	}
	got := synced()
	if pending := ob.Pending(k, 10, 1<<20); len(pending) > 0 && !slices.Contains(got, segName(1)) {
		close(release)
		<-done
		t.Fatalf("pending %v, but only %v fsynced: the first segment's entry is not", bodies(pending), got)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := synced(); !slices.Contains(got, segName(1)) || !slices.Contains(got, segName(2)) {
		t.Fatalf("segments fsynced: %v, want both %s and %s", got, segName(1), segName(2))
	}
	if got, want := bodies(ob.Pending(k, 10, 1<<20)), bodies(entries(k, 0, 2)); !slices.Equal(got, want) {
		t.Fatalf("pending %v, want %v", got, want)
	}
}
