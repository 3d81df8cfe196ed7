package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"testing"
)

// minorFaults is the process's minor page faults so far.
func minorFaults(t *testing.T) int64 {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return ru.Minflt
}

// With the floor the heap takes the floor's room from the system at once:
// allocations after it, up to the floor, reuse pages the heap already
// holds instead of faulting fresh ones in one page at a time (a fresh
// broker's first seconds under load).
func TestGCFloorTakesItsRoomAtStart(t *testing.T) {
	defer func() { gcBallast = nil; runtime.GC() }()
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOGC or GOMEMLIMIT set: the floor is off by design")
	}
	debug.FreeOSMemory() // no free heap pages left over from before
	if !keepGCFloor(64) {
		t.Fatal("no floor kept")
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	if free := s[0].Value.Uint64(); free < 60<<20 {
		t.Fatalf("%d MiB of free heap held from the system after a 64 MiB floor, want at least 60", free>>20)
	}
	if raceOn {
		return
	}
	const size, piece = 48 << 20, 64 << 10
	f0 := minorFaults(t)
	keep := make([][]byte, 0, size/piece)
	for range size / piece {
		b := make([]byte, piece)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		keep = append(keep, b)
	}
	faults := minorFaults(t) - f0
	runtime.KeepAlive(keep)
	if pages := int64(size / 4096); faults > pages/4 {
		t.Fatalf("%d minor page faults writing %d pages of new heap after the floor, want at most %d: the heap did not keep the floor's room", faults, pages, pages/4)
	}
	t.Logf("%d minor page faults for %d pages", faults, size/4096)
}
