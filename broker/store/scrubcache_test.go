package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cachedLog returns the bytes of path in the page cache (cachestat), and
// false if the kernel cannot tell.
func cachedLog(t *testing.T, path string) (int64, bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return osFile{f}.CachedBytes(0, 0) // 0 length: to the end of the file
}

// dropLog drops path's clean pages from the page cache.
func dropLog(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// TestScrubLeavesThePageCacheAsItFoundIt: a scrub pass over sealed
// segments that were not in the page cache drops what it read (they are
// as uncached afterwards as before), and leaves a segment that was cached
// cached.
func TestScrubLeavesThePageCacheAsItFoundIt(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 3 << 20, ScrubRate: -1}
	s := openT(t, opts)
	big := strings.Repeat("x", 4000)
	for i := 0; i < 1000; i++ {
		mustAppend(t, s, "c", i%2, big, big, big)
	}
	s.Close()
	logs, err := filepath.Glob(filepath.Join(dir, "log", "*"+segSuffix))
	if err != nil || len(logs) < 4 {
		t.Fatalf("%d log segments (%v), want at least 4", len(logs), err)
	}
	logs = logs[:len(logs)-1] // sealed ones; the last is the active segment
	warm := logs[0]
	for _, p := range logs {
		dropLog(t, p)
		if c, ok := cachedLog(t, p); !ok {
			t.Skip("the kernel cannot tell what is cached (cachestat needs Linux 6.5)")
		} else if c != 0 {
			t.Skipf("%s keeps %d bytes cached after FADV_DONTNEED (tmpfs?)", p, c)
		}
	}
	if _, err := os.ReadFile(warm); err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	for _, p := range logs {
		before[p], _ = cachedLog(t, p)
	}
	if fi, _ := os.Stat(warm); before[warm] < fi.Size() {
		t.Fatalf("read segment has %d of %d bytes cached", before[warm], fi.Size())
	}

	opts.ScrubRate, opts.ScrubDelay = 1<<30, time.Millisecond
	s = openT(t, opts)
	waitFor(t, func() bool { return s.Scrub().Passes > 0 })
	if st := s.Scrub(); st.Bytes == 0 || st.Damaged != 0 {
		t.Fatalf("scrub: %+v", st)
	}
	for _, p := range logs {
		after, _ := cachedLog(t, p)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d bytes, %d cached before the scrub, %d after", filepath.Base(p), fi.Size(), before[p], after)
		switch {
		case p == warm && after < fi.Size():
			t.Errorf("cached segment %s: %d of %d bytes cached after the scrub", filepath.Base(p), after, fi.Size())
		case p != warm && after > before[p]+scrubPiece:
			t.Errorf("cold segment %s: %d bytes cached after the scrub, %d before (size %d)", filepath.Base(p), after, before[p], fi.Size())
		}
	}
}
