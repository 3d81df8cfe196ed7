// Package bufpool recycles byte buffers by power-of-two size class, for hot
// paths that fill a buffer, hand it on, and know when it is free again.
//
// Reusing warm buffers matters on this kind of VM, where writing into
// freshly allocated memory is several times slower than into reused memory
// (freed memory goes back to the host; see MACHINE-NOTES), and a large
// allocation is also cleared before use.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool holds buffers whose capacities are the powers of two from Min to Max.
// A Pool is safe for concurrent use.
type Pool struct {
	min, max int
	classes  [bits.UintSize]sync.Pool // index = log2(capacity)
}

// holders recycles the *[]byte that a sync.Pool stores, so that putting a
// buffer back does not allocate.
var holders = sync.Pool{New: func() any { return new([]byte) }}

// New returns a Pool for capacities min..max, both rounded up to powers of two.
func New(min, max int) *Pool {
	return &Pool{min: 1 << bits.Len(uint(min-1)), max: 1 << bits.Len(uint(max-1))}
}

// class returns the index of the smallest pooled capacity >= n.
func (p *Pool) class(n int) int {
	return bits.Len(uint(max(n, p.min) - 1))
}

// Get returns a buffer of length n. Its contents are undefined. Sizes above
// Max are allocated and never pooled.
func (p *Pool) Get(n int) []byte {
	if n < 1 || n > p.max {
		return make([]byte, n)
	}
	c := p.class(n)
	if v := p.classes[c].Get(); v != nil {
		h := v.(*[]byte)
		b := (*h)[:n]
		*h = nil
		holders.Put(h)
		return b
	}
	return make([]byte, n, 1<<c)
}

// Put gives b back for reuse; the caller must not touch it afterwards.
// Buffers whose capacity is not one of the Pool's classes are dropped, so
// anything from Get can be put back whatever its size.
func (p *Pool) Put(b []byte) {
	c := cap(b)
	if c < p.min || c > p.max || c&(c-1) != 0 {
		return
	}
	h := holders.Get().(*[]byte)
	*h = b[:0]
	p.classes[bits.Len(uint(c-1))].Put(h)
}
