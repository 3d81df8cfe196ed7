package georeplicator

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"metaq/broker/store"
)

// partitionCutter is implemented by sinks that can cut a partition back
// durably (*store.Store).
type partitionCutter interface {
	TruncatePartition(topic string, partition int, offset int64) error
}

// TailFile is one saved unreplicated tail: the records a site held beyond
// what the master of Generation had when it was promoted.
type TailFile struct {
	Path       string
	Topic      string
	Partition  int
	From, To   int64 // partition offsets the records had here
	Generation uint64
	Records    int
}

// tailName is <topic>-<partition>-<from>-<to>-gen<generation>.records.
func tailName(topic string, part int, from, to int64, gen uint64) string {
	return fmt.Sprintf("%s-%d-%d-%d-gen%d.records", topic, part, from, to, gen)
}

// ListTails reads the saved tails in dir (none when it does not exist).
func ListTails(dir string) ([]TailFile, error) {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("georeplicator: list unreplicated tails: %w", err)
	}
	var out []TailFile
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".records")
		if !ok {
			continue
		}
		f, ok := parseTailName(name)
		if !ok {
			continue
		}
		f.Path = filepath.Join(dir, e.Name())
		data, err := os.ReadFile(f.Path)
		if err != nil {
			return nil, fmt.Errorf("georeplicator: read %s: %w", f.Path, err)
		}
		if f.Records, err = countRecords(data); err != nil {
			return nil, fmt.Errorf("georeplicator: %s: %w", f.Path, err)
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func parseTailName(name string) (TailFile, bool) {
	// The topic may hold '-': the four last fields are numbers.
	parts := strings.Split(name, "-")
	if len(parts) < 5 || !strings.HasPrefix(parts[len(parts)-1], "gen") {
		return TailFile{}, false
	}
	n := len(parts)
	part, e1 := strconv.Atoi(parts[n-4])
	from, e2 := strconv.ParseInt(parts[n-3], 10, 64)
	to, e3 := strconv.ParseInt(parts[n-2], 10, 64)
	gen, e4 := strconv.ParseUint(strings.TrimPrefix(parts[n-1], "gen"), 10, 64)
	if e1 != nil || e2 != nil || e3 != nil || e4 != nil {
		return TailFile{}, false
	}
	return TailFile{Topic: strings.Join(parts[:n-4], "-"), Partition: part, From: from, To: to, Generation: gen}, true
}

// forkCuts is where this slave cuts its partitions before following a
// master that resumes it by partition ends (welcome w): per partition the
// lower of the master's cut (w.PromotionEnds: where the master's
// generations this log lacks start) and this log's own (where its own
// generations after the newest one both hold, w.Common, start, from its
// history; see forkEnds). ownLower reports that this log's own cut is the
// lower one somewhere: the master chose the stream's start without it.
func (r *Receiver) forkCuts(w welcome) (cuts []partEnd, ownLower bool) {
	m := make(map[string]int64, len(w.PromotionEnds))
	for _, e := range w.PromotionEnds {
		m[PartKey(e.Topic, e.Partition)] = e.End
	}
	if id := r.opts.Identity; id != nil && w.HasCommon {
		var ends []partEnd
		for _, pi := range r.opts.Sink.Partitions() {
			ends = append(ends, partEnd{Topic: pi.Topic, Partition: pi.Partition, End: pi.Written})
		}
		for k, v := range cutsAbove(id.History(), w.Common, ends) {
			if c, ok := m[k]; !ok || v < c {
				m[k], ownLower = v, true
			}
		}
	}
	return endsList(m), ownLower
}

// cutTail saves aside and cuts every local partition that holds more than
// the master had when it was promoted: those records were never
// replicated, and the new master reuses their offsets. The file is durable
// before the cut, so a crash in between loses nothing (the next connection
// saves the same tail again).
func (r *Receiver) cutTail(ends []partEnd, gen uint64) error {
	sink := r.opts.Sink
	var todo []partEnd
	for _, e := range ends {
		info, err := sink.Partition(e.Topic, e.Partition)
		if err != nil || info.Written <= e.End {
			continue
		}
		todo = append(todo, e)
	}
	if len(todo) == 0 {
		return nil
	}
	cutter, ok := sink.(partitionCutter)
	if !ok {
		e := todo[0]
		return &DivergedError{e.Topic, e.Partition, e.End, "holds records the new master never had, and this store cannot cut them"}
	}
	if err := sink.Flush(); err != nil {
		return fmt.Errorf("georeplicator: flush before cutting the unreplicated tail: %w", err)
	}
	for _, e := range todo {
		info, err := sink.Partition(e.Topic, e.Partition)
		if err != nil {
			return fmt.Errorf("georeplicator: partition %s-%d: %w", e.Topic, e.Partition, err)
		}
		// The tail is saved as runs of readable records, one file each: a
		// range this site lost to disk damage cannot be read, nor saved,
		// nor fetched from a master that never had it, and refusing the cut
		// for it would leave this site following no master for good.
		runs, lost, err := readTail(sink, e, info.Max)
		if err != nil {
			return err
		}
		n := 0
		for _, run := range runs {
			rn, err := countRecords(run.b)
			if err != nil {
				return &DivergedError{e.Topic, e.Partition, run.from, "the new master's end is not a record boundary here"}
			}
			path := filepath.Join(r.opts.TailDir, tailName(e.Topic, e.Partition, run.from, run.from+int64(len(run.b)), gen))
			if err := writeFileAtomic(path, run.b); err != nil {
				return fmt.Errorf("georeplicator: save the unreplicated tail of %s-%d: %w", e.Topic, e.Partition, err)
			}
			n += rn
		}
		for _, l := range lost {
			r.log.Error("REPLICATION: records the new master never had were lost to disk damage here; they are cut and cannot be saved aside",
				"partition", fmt.Sprintf("%s-%d", e.Topic, e.Partition), "from", l[0], "to", l[1], "generation", gen)
		}
		path := filepath.Join(r.opts.TailDir, tailName(e.Topic, e.Partition, e.End, info.Max, gen))
		if len(runs) != 1 || len(lost) != 0 {
			path = filepath.Join(r.opts.TailDir, fmt.Sprintf("%s-%d-*-gen%d.records", e.Topic, e.Partition, gen))
		}
		if err := cutter.TruncatePartition(e.Topic, e.Partition, e.End); err != nil {
			return &DivergedError{e.Topic, e.Partition, e.End, fmt.Sprintf("cannot cut the unreplicated tail: %v", err)}
		}
		r.log.Warn("REPLICATION: cut records the new master never had; saved aside",
			"partition", fmt.Sprintf("%s-%d", e.Topic, e.Partition), "from", e.End, "to", info.Max,
			"records", n, "file", path, "generation", gen)
		r.mu.Lock()
		r.st.Unreplicated += int64(n)
		r.mu.Unlock()
	}
	return nil
}

// tailRun is a readable run of a partition's tail from offset from.
type tailRun struct {
	from int64
	b    []byte
}

// readTail reads the records of e's partition from e.End to max as runs
// around the ranges the store lost to damage (lost, [from, to) each).
func readTail(sink LogSink, e partEnd, max int64) (runs []tailRun, lost [][2]int64, err error) {
	var cur *tailRun
	for off := e.End; off < max; {
		b, err := sink.Read(e.Topic, e.Partition, off, int(min(max-off, 4<<20)))
		var de *store.DamagedError
		if errors.As(err, &de) && de.Next > off {
			lost = append(lost, [2]int64{off, min(de.Next, max)})
			cur = nil
			off = de.Next
			continue
		}
		if err != nil || len(b) == 0 {
			return nil, nil, &DivergedError{e.Topic, e.Partition, off, fmt.Sprintf("cannot read the unreplicated tail: %v", err)}
		}
		if cur == nil {
			runs = append(runs, tailRun{from: off})
			cur = &runs[len(runs)-1]
		}
		cur.b = append(cur.b, b...)
		off += int64(len(b))
	}
	return runs, lost, nil
}
