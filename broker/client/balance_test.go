package client

import (
	"bufio"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestAssignJavaVectors compares Assign with outputs of the Java client's
// own DefaultLoadBalanceStrategy and ConsisHashStrategy code
// (testdata/balance_vectors.txt was produced by running the MetaQ 1.4.6 client's
// own strategy code under a JDK; the generator is not part of this repository).
func TestAssignJavaVectors(t *testing.T) {
	f, err := os.Open("testdata/balance_vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		fs := strings.Split(line, "|")
		if len(fs) != 6 {
			t.Fatalf("bad vector %q", line)
		}
		s := StrategyDefault
		if fs[1] == "CONSIST" {
			s = StrategyConsist
		}
		got := Assign(s, fs[4], strings.Split(fs[2], ","), strings.Split(fs[3], ","))
		sort.Strings(got)
		want := []string{}
		if fs[5] != "" {
			want = strings.Split(fs[5], ",")
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s %s %s: got %v, want %v", fs[0], fs[1], fs[4], got, want)
		}
		n++
	}
	if n < 30 {
		t.Fatalf("only %d vectors", n)
	}
}

// TestAssignDefaultByHand checks DEFAULT against assignments worked out by
// hand from the Java algorithm, including the string sort of partitions.
func TestAssignDefaultByHand(t *testing.T) {
	parts := []string{"0-0", "0-1", "0-2", "0-3", "0-4", "0-5", "0-6", "0-7", "0-8", "0-9", "0-10", "0-11"}
	cons := []string{"g_b", "g_a"}
	// Sorted: 0-0 0-1 0-10 0-11 0-2 ... 0-9; 12/2 = 6 each.
	if got := Assign(StrategyDefault, "g_a", cons, parts); strings.Join(got, ",") != "0-0,0-1,0-10,0-11,0-2,0-3" {
		t.Fatalf("g_a got %v", got)
	}
	if got := Assign(StrategyDefault, "g_b", cons, parts); strings.Join(got, ",") != "0-4,0-5,0-6,0-7,0-8,0-9" {
		t.Fatalf("g_b got %v", got)
	}
	// 7 partitions over 3 consumers: 3, 2, 2.
	p7 := []string{"0-0", "0-1", "0-2", "0-3", "1-0", "1-1", "1-2"}
	c3 := []string{"g_c1", "g_c2", "g_c3"}
	want := map[string]string{"g_c1": "0-0,0-1,0-2", "g_c2": "0-3,1-0", "g_c3": "1-1,1-2"}
	for c, w := range want {
		if got := Assign(StrategyDefault, c, c3, p7); strings.Join(got, ",") != w {
			t.Fatalf("%s got %v want %s", c, got, w)
		}
	}
	// More consumers than partitions: the last ones get nothing.
	if got := Assign(StrategyDefault, "g_c3", c3, []string{"0-0", "0-1"}); len(got) != 0 {
		t.Fatalf("g_c3 got %v", got)
	}
	// A consumer not in the list gets nothing.
	if got := Assign(StrategyDefault, "g_x", c3, p7); len(got) != 0 {
		t.Fatalf("stranger got %v", got)
	}
}

// TestAssignCoversOnce checks that for both strategies every partition goes
// to exactly one consumer.
func TestAssignCoversOnce(t *testing.T) {
	for _, s := range []Strategy{StrategyDefault, StrategyConsist} {
		for nc := 1; nc <= 6; nc++ {
			var cons, parts []string
			for i := 0; i < nc; i++ {
				cons = append(cons, "grp_10.1.1.1-"+strconv.Itoa(i)+"-x")
			}
			for b := 0; b < 3; b++ {
				for p := 0; p < 5; p++ {
					parts = append(parts, strconv.Itoa(b)+"-"+strconv.Itoa(p))
				}
			}
			owner := map[string]string{}
			for _, c := range cons {
				for _, p := range Assign(s, c, cons, parts) {
					if o, dup := owner[p]; dup {
						t.Fatalf("%v: %s owned by %s and %s", s, p, o, c)
					}
					owner[p] = c
				}
			}
			if len(owner) != len(parts) {
				t.Fatalf("%v with %d consumers: %d of %d partitions assigned", s, nc, len(owner), len(parts))
			}
		}
	}
}

func TestKetamaHash(t *testing.T) {
	// md5sum of "0-0" is c7763203e2...: the first four bytes little endian.
	if h := ketamaHash("0-0"); h != 0x033276c7 {
		t.Fatalf("ketama(0-0) = %#x", h)
	}
	// md5sum of "g_a-0" is 531f8c43 5f8b379f ce73b608 790a7379: four points.
	ring := buildRing([]string{"g_a"})
	want := map[uint32]bool{0x438c1f53: true, 0x9f378b5f: true, 0x08b673ce: true, 0x79730a79: true}
	found := 0
	for _, p := range ring {
		if want[p.hash] {
			found++
		}
	}
	if found != 4 || len(ring) != 160 {
		t.Fatalf("ring has %d points, %d of the expected ones", len(ring), found)
	}
}

func TestRoundRobinStartsAtOne(t *testing.T) {
	ps := []Partition{{0, 0}, {0, 1}, {1, 0}}
	var rr RoundRobin
	var got []Partition
	for i := 0; i < 4; i++ {
		p, _ := rr.Select("t", ps, &Message{})
		got = append(got, p)
	}
	want := []Partition{{0, 1}, {1, 0}, {0, 0}, {0, 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("round robin %v, want %v", got, want)
		}
	}
}

func TestOrderedKeepsPartition(t *testing.T) {
	var o Ordered
	ps := []Partition{{0, 0}, {0, 1}, {0, 2}}
	m := &Message{Key: []byte("order-42")}
	first, err := o.Select("t", ps, m)
	if err != nil {
		t.Fatal(err)
	}
	// More partitions: the key stays.
	more := append(append([]Partition(nil), ps...), Partition{1, 0}, Partition{1, 1}, Partition{1, 2})
	for i := 0; i < 10; i++ {
		p, err := o.Select("t", more, m)
		if err != nil || p != first {
			t.Fatalf("key moved to %v (%v), want %v", p, err, first)
		}
	}
	// Its partition gone: fail rather than move.
	var rest []Partition
	for _, p := range more {
		if p != first {
			rest = append(rest, p)
		}
	}
	if _, err := o.Select("t", rest, m); err == nil {
		t.Fatal("ordered selector moved a key off a missing partition")
	}
	// KeyHash is stable for equal keys.
	a, _ := KeyHash{}.Select("t", more, m)
	b, _ := KeyHash{}.Select("t", more, &Message{Key: []byte("order-42")})
	if a != b {
		t.Fatal("key hash not stable")
	}
}

func TestParseOffsetValue(t *testing.T) {
	cases := []struct {
		in      string
		off, id int64
	}{
		{"-1-0", 0, -1},
		{"-1-25", 25, -1},
		{"-5468927451604189184-25", 25, -5468927451604189184},
		{"1234567890124-58", 58, 1234567890124},
		{"58", 58, -1},
	}
	for _, c := range cases {
		off, id, err := ParseOffsetValue(c.in)
		if err != nil || off != c.off || id != c.id {
			t.Errorf("%q: got %d %d %v", c.in, off, id, err)
		}
		if c.in != "58" && FormatOffsetValue(off, id) != c.in {
			t.Errorf("format %q: %q", c.in, FormatOffsetValue(off, id))
		}
	}
}
