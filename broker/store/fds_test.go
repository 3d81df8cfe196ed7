package store

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
)

// TestOutOfFileDescriptors lowers RLIMIT_NOFILE, uses up every descriptor
// (as idle client connections would) and keeps appending across segment
// rolls: the store rolls with its reserved descriptors and never stops;
// once descriptors are freed it refills its reserve.
func TestOutOfFileDescriptors(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Skip("getrlimit:", err)
	}
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 8 << 10}
	s := openT(t, opts)
	mustAppend(t, s, "fd", 0, "before")
	lim := old
	lim.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip("setrlimit:", err)
	}
	var hog []*os.File
	release := func() {
		for _, f := range hog {
			f.Close()
		}
		hog = nil
	}
	t.Cleanup(func() {
		release()
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	})
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		hog = append(hog, f)
	}
	nsegs := func() int { // the store's own list: listing the directory needs a descriptor
		s.segMu.RLock()
		defer s.segMu.RUnlock()
		return len(s.segs)
	}
	segs := nsegs()
	body := make([]byte, 1000)
	for i := 0; i < 40; i++ {
		if _, err := s.Append(context.Background(), "fd", i%2, []Message{{Body: body}}); err != nil {
			t.Fatalf("append %d with no free descriptor: %v", i, err)
		}
	}
	if n := nsegs(); n <= segs {
		t.Fatalf("no segment rolled with no free descriptor (%d segments)", n)
	}
	if err := s.Health(); err != nil {
		t.Fatalf("Health with no free descriptor: %v", err)
	}
	// more rolls than the reserve holds: the store goes on in its active
	// segment and rolls again once descriptors are back
	for i := 0; i < 80; i++ {
		if _, err := s.Append(context.Background(), "fd", i%2, []Message{{Body: body}}); err != nil {
			t.Fatalf("append %d after the reserve ran out: %v", i, err)
		}
	}
	release()
	n := nsegs()
	for i := 0; i < 20; i++ {
		mustAppend(t, s, "fd", 0, string(body))
	}
	if nsegs() <= n {
		t.Fatal("no roll after descriptors were freed")
	}
	if got := len(s.fds.spare); got != reserveFDs {
		t.Fatalf("reserve holds %d descriptors after they were freed, want %d", got, reserveFDs)
	}
	s.Close()
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old)
	s2 := openT(t, opts)
	info, _ := s2.Partition("fd", 0)
	if info.Max == 0 {
		t.Fatal("nothing survived")
	}
}
