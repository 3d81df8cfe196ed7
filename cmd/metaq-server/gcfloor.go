package main

import (
	"os"
	"runtime"
)

// defaultGCFloorMiB is -gcfloor's default.
const defaultGCFloorMiB = 256

// gcBallast is what keepGCFloor allocated; it stays reachable (and
// untouched) for the life of the process.
var gcBallast []byte

// keepGCFloor makes the garbage collector's heap goal at least about twice
// mib MiB: with the broker's live heap at a few to tens of MB (its data is
// in the page cache, not the heap), the default goal (twice the live heap)
// had it collect every few MB allocated, 20 times a second at 300,000 puts
// a second, each cycle marking the whole partition table. It allocates a
// ballast the collector counts as live heap: one object without pointers,
// never written, so it costs address space and no resident memory, and
// marking it costs nothing. Above mib of live heap the collector paces as
// it would without it, plus mib. GOGC or GOMEMLIMIT set in the environment
// means the operator tunes the collector: no ballast then; neither with mib
// 0. With the ballast the heap then takes mib MiB from the system at once
// (prefaultHeap).
func keepGCFloor(mib int) bool {
	if mib <= 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	gcBallast = make([]byte, mib<<20)
	runtime.KeepAlive(gcBallast)
	prefaultHeap(mib)
	return true
}

// prefaultHeap makes the heap take mib MiB of memory from the system now,
// at start-up, and keep it: a block of that size, written once a page,
// then let go and collected, stays with the runtime as free heap (the
// floor keeps the heap goal above it, so the scavenger does not hand it
// back). With the floor the heap grows to about mib before its first
// collection; without this, that growth is a page fault per 4 KiB in the
// broker's first seconds under load, each one dearer on a virtual machine
// whose host took the guest's free memory back.
func prefaultHeap(mib int) {
	b := make([]byte, mib<<20)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	runtime.KeepAlive(b)
	runtime.GC() // b is garbage now: its pages go back to the heap, resident
}
