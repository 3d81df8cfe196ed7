package broker

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// TestPutBatchSlabReused: a read's puts spread over many partitions (one
// batch each, as at 10,000 partitions) are cut from a batch slab that is
// reused once their answers went out, so the broker does not allocate a
// batch, a message and an opaque per put. It counts, with every allocation
// profiled, the bytes newBatchSlab allocated over 200 reads of 64 puts to
// 64 partitions, each read answered before the next is sent.
func TestPutBatchSlabReused(t *testing.T) {
	const parts, reads = 64, 200
	ini, err := os.ReadFile(filepath.Join(vectorDir, "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, fmt.Appendf(ini, "\n[topic=wide]\nnumPartitions=%d\n", parts))
	brk := startBroker(t, cfg, nil)
	cl := dial(t, brk.Addr())
	body := []byte("slab")
	read := func(r int) {
		t.Helper()
		var buf []byte
		for p := range parts {
			buf = (&wire.Put{Topic: "wide", Partition: int32(p), Checksum: wire.NoChecksum, Body: body, Opaque: int32(r*parts + p)}).AppendTo(buf)
		}
		cl.send(buf)
		for range parts {
			c, err := cl.d.Decode()
			if err != nil {
				t.Fatalf("read %d: %v", r, err)
			}
			if res, ok := c.(*wire.Result); !ok || !res.OK() {
				t.Fatalf("read %d: put answered %v", r, c)
			}
		}
	}
	read(0) // the topic's registration and the partitions' creation
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	before := slabBytes(t)
	for r := 1; r <= reads; r++ {
		read(r)
	}
	got := slabBytes(t) - before
	// Unpooled, each put costs a batch, a message, an opaque and a place
	// in the list of batches stored together. sync.Pool drops a share of
	// what it is given under the race detector, and a garbage collection
	// empties it: half of that is the bound.
	perPut := float64(got) / (reads * parts)
	unpooled := unsafe.Sizeof(pendingPuts{}) + unsafe.Sizeof(store.Message{}) + 4 + 8
	t.Logf("newBatchSlab allocated %d bytes over %d puts: %.1f bytes a put (%d unpooled)", got, reads*parts, perPut, unpooled)
	if perPut > float64(unpooled)/2 {
		t.Fatalf("newBatchSlab allocated %.1f bytes a put over %d reads of %d partitions each: the slabs are not reused (unpooled: %d)", perPut, reads, parts, unpooled)
	}
}

// slabBytes is what newBatchSlab allocated so far in the memory profile
// (every allocation recorded once MemProfileRate is 1).
func slabBytes(t *testing.T) int64 {
	t.Helper()
	// The profile shows allocations as of the last completed collection.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	var total int64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.HasSuffix(f.Function, ".newBatchSlab") {
				total += r.AllocBytes
				break
			}
			if !more {
				break
			}
		}
	}
	return total
}
