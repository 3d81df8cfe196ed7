package store

import (
	"testing"
	"unsafe"
)

// TestPartitionHotFieldsShareTwoLines: the fields the writer touches for
// every chunk (see partition) lie in a partition's first 128 bytes, and a
// partition starts on a 64-byte line, so they take two cache lines. A field
// added in front of them, or one that moves a partition into an allocation
// class that is not a multiple of 64 bytes, fails it.
func TestPartitionHotFieldsShareTwoLines(t *testing.T) {
	var p partition
	hot := map[string]uintptr{
		"mu":       unsafe.Offsetof(p.mu) + unsafe.Sizeof(p.mu),
		"wDirty":   unsafe.Offsetof(p.wDirty) + unsafe.Sizeof(p.wDirty),
		"pid":      unsafe.Offsetof(p.pid) + unsafe.Sizeof(p.pid),
		"wEnd":     unsafe.Offsetof(p.wEnd) + unsafe.Sizeof(p.wEnd),
		"end":      unsafe.Offsetof(p.end) + unsafe.Sizeof(p.end),
		"durable":  unsafe.Offsetof(p.durable) + unsafe.Sizeof(p.durable),
		"messages": unsafe.Offsetof(p.messages) + unsafe.Sizeof(p.messages),
		"records":  unsafe.Offsetof(p.records) + unsafe.Sizeof(p.records),
		"tail":     unsafe.Offsetof(p.tail) + unsafe.Sizeof(p.tail),
		"segLast":  unsafe.Offsetof(p.segLast) + unsafe.Sizeof(p.segLast),
	}
	for name, end := range hot {
		if end > 128 {
			t.Errorf("partition.%s ends at byte %d, past the first two cache lines", name, end)
		}
	}
	ps := make([]*partition, 64)
	for i := range ps {
		ps[i] = newPartition(pkey{"t", i}, uint32(i), 0)
	}
	for i, p := range ps {
		if a := uintptr(unsafe.Pointer(p)); a%64 != 0 {
			t.Fatalf("partition %d (%d bytes) at %#x: not on a 64-byte line", i, unsafe.Sizeof(*p), a)
		}
	}
}
