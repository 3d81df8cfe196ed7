package broker

import "metaq/internal/bufpool"

// Put bodies are read into recycled buffers: once a plain put is appended
// the store has copied it, so its buffer can take the next body. Bodies
// that outlive the request (transactional puts, syncs) are simply not
// returned and left to the garbage collector.
var bodies = bufpool.New(256, 64<<10)

// allocBody returns a buffer of length n, pooled when n is in range.
func allocBody(n int) []byte { return bodies.Get(n) }

// freeBody returns a buffer obtained from allocBody. The caller guarantees
// that nothing references it any more.
func freeBody(b []byte) { bodies.Put(b) }
