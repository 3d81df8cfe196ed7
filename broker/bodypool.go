package broker

import "metaq/internal/bufpool"

// Put bodies are read into recycled buffers: once a plain put is appended
// the store has copied it, so its buffer can take the next body. Bodies
// that outlive the request (transactional puts, syncs) are simply not
// returned and left to the garbage collector.
var bodies = bufpool.New(minPooledBody, 64<<10)

// minPooledBody is the smallest body taken from the pool: smaller ones are
// cheaper to allocate than to pass through a sync.Pool.
const minPooledBody = 512

// allocBody returns a buffer of length n, pooled when n is in range.
func allocBody(n int) []byte {
	if n < minPooledBody {
		return make([]byte, n)
	}
	return bodies.Get(n)
}

// freeBody returns a buffer obtained from allocBody. The caller guarantees
// that nothing references it any more.
func freeBody(b []byte) { bodies.Put(b) }
