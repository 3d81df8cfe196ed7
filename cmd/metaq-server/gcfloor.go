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
// 0.
func keepGCFloor(mib int) bool {
	if mib <= 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	gcBallast = make([]byte, mib<<20)
	runtime.KeepAlive(gcBallast)
	return true
}
