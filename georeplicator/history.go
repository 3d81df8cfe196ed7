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

// maxEpochs bounds a history: older epochs are merged into one (see
// boundHistory), so that a history stays small however many failovers a
// brokerId has been through.
const maxEpochs = 16

// boundHistory merges the oldest epochs of h into one so that at most
// maxEpochs remain. The merged epoch has the newest merged generation and,
// per partition, the lowest end of the merged ones (a partition missing
// from any: missing): a site compared with it is cut at or below where it
// would be with the whole history (forkEnds), never above, so the merge
// can only make a rejoining site save aside, and receive again, more than
// it had to.
func boundHistory(h []Epoch) []Epoch {
	if len(h) <= maxEpochs {
		return h
	}
	n := len(h) - maxEpochs + 1
	m := Epoch{Generation: h[n-1].Generation, Ends: map[string]int64{}}
	for k, v := range h[0].Ends {
		low, all := v, true
		for _, e := range h[1:n] {
			x, ok := e.Ends[k]
			if !ok {
				all = false
				break
			}
			low = min(low, x)
		}
		if all {
			m.Ends[k] = low
		}
	}
	return append([]Epoch{m}, h[n:]...)
}

// generations lists the generations of h.
func generations(h []Epoch) []uint64 {
	out := make([]uint64, len(h))
	for i, e := range h {
		out[i] = e.Generation
	}
	return out
}

// commonGeneration is the newest generation of the master's history that
// the other history (lineage: its generations) holds too, 0 (the first
// master's) when they share none: both logs hold the same records up to
// the ends of the epoch after it.
func commonGeneration(master []Epoch, lineage []uint64) uint64 {
	inMaster := make(map[uint64]bool, len(master))
	for _, e := range master {
		inMaster[e.Generation] = true
	}
	var common uint64
	for _, g := range lineage {
		if inMaster[g] {
			common = max(common, g)
		}
	}
	return common
}

// cutsAbove is where the records of the generations of h above common
// start in each partition of ends (the lowest end any such epoch recorded,
// 0 where an epoch lacks the partition): those records are not in a log
// that shares only the generations up to common. Only partitions that
// hold more than that are returned.
func cutsAbove(h []Epoch, common uint64, ends []partEnd) map[string]int64 {
	out := map[string]int64{}
	for _, p := range ends {
		k := PartKey(p.Topic, p.Partition)
		cut := p.End
		for _, e := range h {
			if e.Generation > common {
				cut = min(cut, e.Ends[k]) // a missing partition: 0
			}
		}
		if cut < p.End {
			out[k] = cut
		}
	}
	return out
}

// forkEnds is where a site must cut its partitions (ends, as it holds
// them) to follow a master, from the histories of both logs: they share
// every generation up to the newest both hold, and the records of any
// later generation, in either history, are not in the other log. The
// master computes its part (cutsAbove of its history, from the site's
// generations in hello) and the site its own (cutsAbove of its history,
// from the common generation in welcome).
//
// bj (generation 0, no epoch), gz promoted at generation 1 with ends E1,
// hf promoted at generation 2 from gz's log with ends E2: bj rejoining hf
// cuts at min(E1, E2), gz rejoining hf at E2.
func forkEnds(master, slave []Epoch, ends []partEnd) map[string]int64 {
	common := commonGeneration(master, generations(slave))
	out := cutsAbove(master, common, ends)
	for k, v := range cutsAbove(slave, common, ends) {
		if c, ok := out[k]; !ok || v < c {
			out[k] = v
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

func encodeGenerations(e *enc, gens []uint64) {
	e.u32(uint32(len(gens)))
	for _, g := range gens {
		e.u64(g)
	}
}

func decodeGenerations(d *dec) []uint64 {
	n := int(d.u32())
	if d.err == nil && n > len(d.b)/8 {
		d.err = fmt.Errorf("%w: %d generations claimed", ErrProtocol, n)
		return nil
	}
	out := []uint64{}
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.u64())
	}
	return out
}
