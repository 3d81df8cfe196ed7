package bufpool

import "testing"

func TestGetPut(t *testing.T) {
	p := New(256, 64<<10)
	for _, n := range []int{0, 1, 255, 256, 257, 1000, 1024, 1025, 65536, 65537, 1 << 20} {
		b := p.Get(n)
		if len(b) != n {
			t.Fatalf("Get(%d) has length %d", n, len(b))
		}
		for i := range b {
			b[i] = 0xAB
		}
		p.Put(b)
		b2 := p.Get(n)
		if len(b2) != n {
			t.Fatalf("reused Get(%d) has length %d", n, len(b2))
		}
		p.Put(b2)
	}
	p.Put(make([]byte, 300)) // not a class capacity: dropped
	if b := p.Get(300); cap(b) != 512 {
		t.Fatalf("Get(300) cap %d, want 512", cap(b))
	}
	if b := p.Get(10); cap(b) != 256 {
		t.Fatalf("Get(10) cap %d, want the smallest class 256", cap(b))
	}
}

func TestReuse(t *testing.T) {
	p := New(4096, 1<<20)
	// sync.Pool may drop items (under the race detector it drops some on
	// purpose), so look for reuse over a few rounds.
	var last *byte
	for range 100 {
		b := p.Get(5000)
		if &b[0] == last {
			return
		}
		last = &b[0]
		p.Put(b)
	}
	t.Fatal("a put-back buffer of the same class was never handed out again")
}

func BenchmarkGetPut(b *testing.B) {
	p := New(4096, 4<<20)
	b.ReportAllocs()
	for b.Loop() {
		p.Put(p.Get(200 << 10))
	}
}
