package broker

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"metaq/broker/wire"
)

// TestGetBeyondPromotionEndMovesBack: after SetPromotionEnds, a consumer
// group's first get of a partition beyond its promotion end (inside a
// record, on a record boundary, or beyond the readable end: it read records
// of the former master lost at the failover) answers 301 with the end; a
// get at or before the end, "from the end" (Long.MAX_VALUE), and every
// later get of a group that passed once are answered as before, and so is
// everything once the ends are forgotten. A repair's gets (RepairGroup: a
// slave refilling a range it lost to damage) are never moved.
func TestGetBeyondPromotionEndMovesBack(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	var offsets []int64 // where each record starts
	for i := range 6 {
		body := "record-" + strings.Repeat("x", i) // records of different lengths
		cl.sendCmd(putCmd("test", 0, body, int32(i)))
		r := cl.result()
		if !r.OK() {
			t.Fatalf("put %d: %v", i, r)
		}
		f := strings.Fields(string(r.Body))
		off, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			t.Fatalf("put answer %q: %v", r.Body, err)
		}
		offsets = append(offsets, off)
	}
	end := offsets[2] // records 2.. are this master's own
	readable := partitionEnd(t, brk, "test", 0)
	brk.SetPromotionEnds(map[string]int64{"test-0": end})

	get := func(group string, off int64) (moved int64, served bool) {
		t.Helper()
		cl.sendCmd(&wire.Get{Topic: "test", Group: group, Partition: 0, Offset: off, MaxSize: 1 << 16, Opaque: 1})
		switch c := cl.read().(type) {
		case *wire.Value:
			return 0, true
		case *wire.Result:
			if c.Code != wire.StatusMoved {
				return 0, false
			}
			to, err := strconv.ParseInt(string(c.Body), 10, 64)
			if err != nil {
				t.Fatalf("301 %q", c.Body)
			}
			return to, false
		default:
			t.Fatalf("get answered %T", c)
		}
		return 0, false
	}
	for _, c := range []struct {
		name      string
		group     string
		off       int64
		wantMoved bool
	}{
		{"inside a record after the end", "g1", offsets[3] + 3, true},
		{"beyond the readable end", "g2", readable + 40, true},
		{"at a record boundary after the end", "g3", offsets[4], true},
		{"at the end", "g4", end, false},
		{"before the end", "g5", offsets[1], false},
		{"a repair (a slave refilling a damaged range) after the end", RepairGroup, offsets[4], false},
	} {
		to, served := get(c.group, c.off)
		if c.wantMoved && to != end {
			t.Errorf("%s (%d): moved to %d, served %t; want 301 %d", c.name, c.off, to, served, end)
		}
		if !c.wantMoved && !served {
			t.Errorf("%s (%d): not served (moved to %d)", c.name, c.off, to)
		}
	}
	// Long.MAX_VALUE keeps its meaning: 301 with the readable end.
	if to, _ := get("g6", math.MaxInt64); to != readable {
		t.Errorf("get at Long.MAX_VALUE moved to %d, want the readable end %d", to, readable)
	}
	// A group that read from the end on is served beyond it.
	if _, served := get("g4", offsets[5]); !served {
		t.Error("a group that passed at the end is moved later")
	}
	brk.SetPromotionEnds(nil)
	if _, served := get("g7", offsets[3]+3); !served {
		t.Error("with the ends forgotten a get inside a record is not served as before")
	}
}
