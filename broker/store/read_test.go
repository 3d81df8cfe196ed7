package store

import (
	"bytes"
	"context"
	"math/rand"
	"testing"
)

// Read assembles a get from chunks read with as few preads as it can
// (merged across small gaps, cut at gaps over readGap, at 4 MiB and at
// segment ends). Whatever the layout, a get at any offset and size must be
// exactly the partition's bytes there.
func TestReadAssemblesExactBytes(t *testing.T) {
	for _, c := range []struct {
		name     string
		segBytes int64
		rounds   int
		big      int // body size of the filler partition's records: gaps over readGap
	}{
		{"small segments", 96 << 10, 400, 6 << 10},
		{"past the 4 MiB pread", 64 << 20, 700, 2 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := openT(t, Options{SegmentBytes: c.segBytes, blockEntries: 16})
			rnd := rand.New(rand.NewSource(7))
			want := map[int][]byte{}
			add := func(p int, bodies ...[]byte) {
				msgs := make([]Message, len(bodies))
				for i, b := range bodies {
					msgs[i] = Message{Body: b}
				}
				a, err := s.Append(context.Background(), "r", p, msgs)
				if err != nil {
					t.Fatal(err)
				}
				for i, b := range bodies {
					want[p] = AppendRecord(want[p], a[i].ID, 0, b)
				}
			}
			body := func(n int) []byte {
				b := make([]byte, n)
				rnd.Read(b)
				return b
			}
			for i := 0; i < c.rounds; i++ {
				// partition 0: single small records, batches, and now and
				// then a filler entry wider than readGap between its chunks
				add(0, body(1+rnd.Intn(200)))
				if i%5 == 0 {
					add(0, body(30), body(1+rnd.Intn(3000)), body(7))
				}
				add(1, body(1+rnd.Intn(100)))
				if i%7 == 0 {
					add(2, body(c.big))
				}
				if i%20 == 0 {
					// a run of partition 0 with nothing between: back to back
					for k := 0; k < 20; k++ {
						add(0, body(5000+rnd.Intn(2000)))
					}
				}
			}
			if err := s.Flush(); err != nil {
				t.Fatal(err)
			}
			for p, w := range want {
				if got := readAll(t, s, "r", p); !bytes.Equal(got, w) {
					t.Fatalf("partition %d: whole read differs (%d bytes, want %d)", p, len(got), len(w))
				}
				for k := 0; k < 100; k++ {
					off := rnd.Int63n(int64(len(w)))
					max := 1 + rnd.Intn(3<<20)
					if k%10 == 0 {
						max = 8 << 20
					}
					got, err := s.Read("r", p, off, max)
					if err != nil {
						t.Fatalf("partition %d: Read(%d, %d): %v", p, off, max, err)
					}
					if exp := w[off:min(off+int64(max), int64(len(w)))]; !bytes.Equal(got, exp) {
						t.Fatalf("partition %d: Read(%d, %d): %d bytes differ from the %d written there", p, off, max, len(got), len(exp))
					}
				}
			}
		})
	}
}
