package broker

import (
	"math/bits"
	"sync"
)

// Put bodies are read into buffers recycled through size-classed pools:
// once a plain put is appended the store has copied it, so its buffer can
// take the next body. Reusing warm buffers matters on this kind of VM,
// where writing into freshly allocated memory is several times slower than
// into reused memory (see MACHINE-NOTES: freed memory goes back to the
// host). Bodies that outlive the request (transactional puts, syncs) are
// simply not returned and left to the garbage collector.
const (
	minPooledBody = 256
	maxPooledBody = 64 << 10
)

var bodyPools [18]sync.Pool // index = log2(size); 64 KiB is index 16

// slotPool recycles the *[]byte holders the body pools store, so that
// returning a buffer does not allocate a new holder each time.
var slotPool = sync.Pool{New: func() any { return new([]byte) }}

// poolClass returns the index of the smallest pooled size >= n.
func poolClass(n int) int {
	if n <= minPooledBody {
		return bits.Len(minPooledBody - 1)
	}
	return bits.Len(uint(n - 1))
}

// allocBody returns a buffer of length n, pooled when n is in range.
func allocBody(n int) []byte {
	if n < 1 || n > maxPooledBody {
		return make([]byte, n)
	}
	c := poolClass(n)
	if v := bodyPools[c].Get(); v != nil {
		slot := v.(*[]byte)
		b := (*slot)[:n]
		*slot = nil
		slotPool.Put(slot)
		return b
	}
	return make([]byte, n, 1<<c)
}

// freeBody returns a buffer obtained from allocBody. The caller guarantees
// that nothing references it any more.
func freeBody(b []byte) {
	c := cap(b)
	if c < minPooledBody || c > maxPooledBody || c&(c-1) != 0 {
		return // not one of ours
	}
	slot := slotPool.Get().(*[]byte)
	*slot = b[:0]
	bodyPools[bits.Len(uint(c-1))].Put(slot)
}
