package main

import (
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
)

// heapGoal is the garbage collector's heap goal now.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The floor raises the collector's heap goal to about twice itself; GOGC
// or GOMEMLIMIT in the environment, or 0, leave the collector alone.
func TestGCFloor(t *testing.T) {
	defer func() { gcBallast = nil; runtime.GC() }()
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOGC or GOMEMLIMIT set: the floor is off by design")
	}
	if keepGCFloor(0) {
		t.Fatal("a floor of 0 MiB was kept")
	}
	runtime.GC()
	if g := heapGoal(); g >= 128<<20 {
		t.Fatalf("heap goal %d before the floor, want it below 128 MiB for the test to mean anything", g)
	}
	if !keepGCFloor(64) {
		t.Fatal("no floor kept")
	}
	runtime.GC()
	if g := heapGoal(); g < 128<<20 {
		t.Fatalf("heap goal %d MiB with a 64 MiB floor, want at least 128", g>>20)
	}
	gcBallast = nil
	t.Setenv("GOGC", "100")
	if keepGCFloor(64) || gcBallast != nil {
		t.Fatal("floor kept with GOGC set")
	}
}
