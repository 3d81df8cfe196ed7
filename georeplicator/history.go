package georeplicator

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
)

// Epoch is one generation in the history of a log: the master of
// Generation was promoted with these partition ends ("topic-partition" ->
// end, PartKey), and that log's records of the partition from there on are
// its own. A partition missing from Ends had no record there at the
// promotion. Kafka keeps the same history per partition (its leader-epoch
// checkpoint, epoch -> start offset).
type Epoch struct {
	Generation uint64           `json:"generation"`
	Ends       map[string]int64 `json:"ends"`
}

// cloneHistory is a deep copy of h.
func cloneHistory(h []Epoch) []Epoch {
	if h == nil {
		return nil
	}
	out := make([]Epoch, len(h))
	for i, e := range h {
		out[i] = Epoch{Generation: e.Generation, Ends: maps.Clone(e.Ends)}
	}
	return out
}

// sameHistory reports whether a and b hold the same epochs.
func sameHistory(a, b []Epoch) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Generation != b[i].Generation || !maps.Equal(a[i].Ends, b[i].Ends) {
			return false
		}
	}
	return true
}

// forkEnds is where a site must cut its partitions (ends, as it holds
// them) to follow a master: the history of the master's log and of its
// own log (slave) share every generation up to the newest one both hold
// (0, the first master's, when they share none); the records of any later
// generation, in either history, are not in the other log. So each
// partition forks at the lowest end any later epoch of either history
// recorded for it (0 where an epoch lacks the partition). Only partitions
// the site holds beyond their fork are returned.
//
// bj (generation 0, no epoch), gz promoted at generation 1 with ends E1,
// hf promoted at generation 2 from gz's log with ends E2: bj rejoining hf
// cuts at min(E1, E2), gz rejoining hf at E2.
func forkEnds(master, slave []Epoch, ends []partEnd) map[string]int64 {
	inMaster := make(map[uint64]bool, len(master))
	for _, e := range master {
		inMaster[e.Generation] = true
	}
	var common uint64
	for _, e := range slave {
		if inMaster[e.Generation] {
			common = max(common, e.Generation)
		}
	}
	out := map[string]int64{}
	for _, p := range ends {
		k := PartKey(p.Topic, p.Partition)
		cut := p.End
		for _, h := range [2][]Epoch{master, slave} {
			for _, e := range h {
				if e.Generation > common {
					cut = min(cut, e.Ends[k]) // a missing partition: 0
				}
			}
		}
		if cut < p.End {
			out[k] = cut
		}
	}
	return out
}

// endsList turns "topic-partition" -> end into a sorted list.
func endsList(m map[string]int64) []partEnd {
	var out []partEnd
	for k, end := range m {
		i := strings.LastIndexByte(k, '-')
		if i <= 0 {
			continue
		}
		n, err := strconv.Atoi(k[i+1:])
		if err != nil {
			continue
		}
		out = append(out, partEnd{Topic: k[:i], Partition: n, End: end})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// encodeHistory appends h to e: a count, then each epoch's generation and
// ends.
func encodeHistory(e *enc, h []Epoch) {
	e.u32(uint32(len(h)))
	for _, ep := range h {
		e.u64(ep.Generation)
		var ends []partEnd
		for k, v := range ep.Ends {
			i := strings.LastIndexByte(k, '-')
			n, err := strconv.Atoi(k[i+1:])
			if i <= 0 || err != nil {
				continue
			}
			ends = append(ends, partEnd{Topic: k[:i], Partition: n, End: v})
		}
		encodeEnds(e, ends)
	}
}

func decodeHistory(d *dec) []Epoch {
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/12 {
		d.err = fmt.Errorf("%w: %d epochs claimed", ErrProtocol, n)
		return nil
	}
	h := []Epoch{}
	for i := 0; i < n && d.err == nil; i++ {
		ep := Epoch{Generation: d.u64(), Ends: map[string]int64{}}
		for _, p := range decodeEnds(d) {
			ep.Ends[PartKey(p.Topic, p.Partition)] = p.End
		}
		h = append(h, ep)
	}
	return h
}
