package bundle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/broker/store"
)

// samsa recoverOffset (see Samsa and gregor and Plugin files in broker/wire/doc.go): a former gregor slave started as a
// samsa master holds the same messages as the old master, with the same ids,
// but not necessarily at the same byte offsets. Before it registers in
// ZooKeeper it moves every consumer group's saved offset for its partitions
// onto its own offsets, using the saved message id (msgId-offset; see Consumer offsets in broker/wire/doc.go)
// to find the record the group consumed last.

// offsetNodes is what recovery needs from ZooKeeper (*registry.Registry).
type offsetNodes interface {
	Paths() registry.Paths
	Groups(ctx context.Context) ([]string, error)
	Get(ctx context.Context, path string) ([]byte, registry.Stat, error)
	SetPersistent(ctx context.Context, path string, data []byte) error
}

// partitionReader is what recovery needs from the store (*store.Store).
type partitionReader interface {
	Partition(topic string, partition int) (store.PartitionInfo, error)
	Partitions() []store.PartitionInfo
	Read(topic string, partition int, offset int64, maxBytes int) ([]byte, error)
}

// topicPartition names one partition to recover.
type topicPartition struct {
	Topic     string
	Partition int
}

func (tp topicPartition) String() string { return tp.Topic + "-" + strconv.Itoa(tp.Partition) }

// recoverResult sums up one recovery run.
type recoverResult struct {
	Partitions int // partitions looked at
	Moved      int // saved values moved onto a record of this broker
	Reset      int // saved values reset to -1-0
	Unchanged  int // saved values that were already right
	Skipped    int // values left alone: blank, unreadable, pre-1.4 plain offsets, msgId -1
}

func (r *recoverResult) add(o recoverResult) {
	r.Partitions += o.Partitions
	r.Moved += o.Moved
	r.Reset += o.Reset
	r.Unchanged += o.Unchanged
	r.Skipped += o.Skipped
}

// recoverTargets lists the partitions to recover, as MetaQ does for every
// topic the broker registers: each literal configured topic and each topic
// found in the store, partitions 0..numPartitions-1, plus any other
// partition the store holds. Sorted by topic, then partition.
func recoverTargets(cfg *config.Server, st partitionReader) []topicPartition {
	seen := map[topicPartition]bool{}
	var out []topicPartition
	addTopic := func(topic string, n int) {
		for p := 0; p < n; p++ {
			tp := topicPartition{topic, p}
			if !seen[tp] {
				seen[tp] = true
				out = append(out, tp)
			}
		}
	}
	for _, tc := range cfg.Topics {
		if literalTopic(tc.Name) {
			addTopic(tc.Name, tc.NumPartitions)
		}
	}
	for _, pi := range st.Partitions() {
		if tc, ok := cfg.TopicFor(pi.Topic); ok {
			addTopic(pi.Topic, tc.NumPartitions)
		}
		tp := topicPartition{pi.Topic, pi.Partition}
		if !seen[tp] {
			seen[tp] = true
			out = append(out, tp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// literalTopic reports whether a [topic=...] name is a plain name rather
// than a pattern ('.' counts as a name character, as the broker does).
func literalTopic(name string) bool {
	return name != "" && !strings.ContainsAny(name, `*?+[](){}|\^$`)
}

// recoverOffsets runs the recovery over parts with a bounded pool of
// workers and returns what it did. Every partition is tried; the errors of
// all failed ones are joined. Running it again changes nothing.
func recoverOffsets(ctx context.Context, zk offsetNodes, st partitionReader, brokerID int,
	parts []topicPartition, workers int, log *slog.Logger) (recoverResult, error) {
	var total recoverResult
	groups, err := zk.Groups(ctx)
	if err != nil {
		return total, fmt.Errorf("recover offsets: %w", err)
	}
	if len(groups) == 0 || len(parts) == 0 {
		return total, nil
	}
	workers = max(1, min(workers, len(parts)))
	start := time.Now()
	log.Info("SAMSA: recovering consumer offsets", "partitions", len(parts), "groups", len(groups), "workers", workers)

	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	work := make(chan topicPartition)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tp := range work {
				res, err := recoverPartition(ctx, zk, st, brokerID, groups, tp, log)
				mu.Lock()
				total.add(res)
				if err != nil {
					errs = append(errs, fmt.Errorf("partition %s: %w", tp, err))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, tp := range parts {
		select {
		case work <- tp:
		case <-ctx.Done():
			mu.Lock()
			errs = append(errs, ctx.Err())
			mu.Unlock()
			break feed
		}
	}
	close(work)
	wg.Wait()
	log.Info("SAMSA: consumer offsets recovered", "took", time.Since(start).Round(time.Millisecond),
		"partitions", total.Partitions, "moved", total.Moved, "reset", total.Reset,
		"unchanged", total.Unchanged, "skipped", total.Skipped, "errors", len(errs))
	if len(errs) > 0 {
		return total, fmt.Errorf("recover offsets: %w", errors.Join(errs...))
	}
	return total, nil
}

// savedOffset is one group's saved value for the partition being recovered.
type savedOffset struct {
	Path   string
	MsgID  int64
	Offset int64
}

// recoverPartition reads the saved values of every group for tp, scans
// the partition and writes back the values that change.
func recoverPartition(ctx context.Context, zk offsetNodes, st partitionReader, brokerID int,
	groups []string, tp topicPartition, log *slog.Logger) (recoverResult, error) {
	res := recoverResult{Partitions: 1}
	node := strconv.Itoa(brokerID) + "-" + strconv.Itoa(tp.Partition)
	var saved []savedOffset
	for _, g := range groups {
		path := zk.Paths().ConsumerOffsets(g, tp.Topic) + "/" + node
		data, _, err := zk.Get(ctx, path)
		if errors.Is(err, registry.ErrNoNode) {
			continue
		}
		if err != nil {
			return res, err
		}
		s, ok := parseSavedOffset(string(data))
		if !ok {
			if strings.TrimSpace(string(data)) != "" {
				log.Warn("SAMSA: offset left as it is (pre-1.4 plain offset, unreadable, or msgId -1)",
					"path", path, "value", string(data))
			}
			res.Skipped++
			continue
		}
		s.Path = path
		saved = append(saved, s)
	}
	if len(saved) == 0 {
		return res, nil
	}
	m := newOffsetMatcher(saved)
	if err := scanPartition(ctx, st, tp, m.add, log); err != nil {
		return res, err
	}
	for _, c := range m.changes() {
		if c.unchanged {
			res.Unchanged++
			continue
		}
		val := registry.FormatOffset(c.MsgID, c.Offset)
		if err := zk.SetPersistent(ctx, c.Path, []byte(val)); err != nil {
			return res, fmt.Errorf("write %s: %w", c.Path, err)
		}
		if c.reset {
			res.Reset++
		} else {
			res.Moved++
		}
		log.Info("SAMSA: offset recovered", "path", c.Path,
			"old", registry.FormatOffset(c.old.MsgID, c.old.Offset), "new", val)
	}
	return res, nil
}

// parseSavedOffset parses "<msgId>-<offset>" split at the last '-'. It
// refuses the plain "<offset>" of clients before 1.4 (MetaQ skips those
// too), unreadable values, and msgId -1: that group never consumed from
// this partition (its offset was moved by a 301), so there is no record to
// find, and -1 would otherwise match every negative id.
func parseSavedOffset(v string) (savedOffset, bool) {
	v = strings.TrimSpace(v)
	i := strings.LastIndexByte(v, '-')
	if i <= 0 {
		return savedOffset{}, false
	}
	id, err1 := strconv.ParseInt(v[:i], 10, 64)
	off, err2 := strconv.ParseInt(v[i+1:], 10, 64)
	if err1 != nil || err2 != nil || id == -1 {
		return savedOffset{}, false
	}
	return savedOffset{MsgID: id, Offset: off}, true
}

// offsetChange is the new value of one saved offset.
type offsetChange struct {
	savedOffset
	old       savedOffset
	reset     bool // no record matched: -1-0
	unchanged bool // already right: nothing to write
}

// offsetMatcher finds, for each saved value, the last record in log order
// whose id is at or below the saved msgId: that is what MetaQ's loop "for
// each record, move every saved value with msgId >= the record's id onto
// it" ends with. Records are fed in log order; each costs a binary search.
type offsetMatcher struct {
	saved []savedOffset // sorted by MsgID
	// marks[i] is the latest record fed (largest seq) whose id is above
	// saved[i-1].MsgID and at or below saved[i].MsgID: it applies to every
	// value in saved[i:]. The answer for saved[j] is the latest of marks[0..j].
	marks []recordMark
	seq   int64
}

type recordMark struct {
	seq     int64 // 0: none
	id, end int64
}

func newOffsetMatcher(saved []savedOffset) *offsetMatcher {
	s := append([]savedOffset(nil), saved...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].MsgID < s[j].MsgID })
	return &offsetMatcher{saved: s, marks: make([]recordMark, len(s))}
}

// add feeds the next record of the partition: its id and the offset just
// after it.
func (m *offsetMatcher) add(id, end int64) {
	i := sort.Search(len(m.saved), func(k int) bool { return m.saved[k].MsgID >= id })
	if i == len(m.saved) {
		return
	}
	m.seq++
	m.marks[i] = recordMark{seq: m.seq, id: id, end: end}
}

// changes returns one entry per saved value. A value no record matched
// (the partition is empty, or every record is newer than what the group
// consumed) refers to data this broker never held; it is reset to -1-0 so
// the group starts at the partition's beginning.
func (m *offsetMatcher) changes() []offsetChange {
	out := make([]offsetChange, 0, len(m.saved))
	var best recordMark
	for i, s := range m.saved {
		if m.marks[i].seq > best.seq {
			best = m.marks[i]
		}
		c := offsetChange{old: s}
		c.Path = s.Path
		if best.seq > 0 {
			c.MsgID, c.Offset = best.id, best.end
		} else {
			c.MsgID, c.Offset, c.reset = -1, 0, true
		}
		c.unchanged = c.MsgID == s.MsgID && c.Offset == s.Offset
		out = append(out, c)
	}
	return out
}

// scanBytes is how much of a partition one read fetches during recovery.
const scanBytes = 1 << 20

// scanPartition feeds every record of tp, in order, to fn. A partition the
// store does not have is empty. A record whose checksum does not match is
// logged and left out, as MetaQ does.
func scanPartition(ctx context.Context, st partitionReader, tp topicPartition, fn func(id, end int64), log *slog.Logger) error {
	info, err := st.Partition(tp.Topic, tp.Partition)
	if errors.Is(err, store.ErrNoPartition) {
		return nil
	}
	if err != nil {
		return err
	}
	off, size := info.Min, scanBytes
	for off < info.Max {
		if err := ctx.Err(); err != nil {
			return err
		}
		b, err := st.Read(tp.Topic, tp.Partition, off, size)
		if err != nil {
			return fmt.Errorf("read at %d: %w", off, err)
		}
		n, need := 0, 0
		for len(b)-n >= store.RecordHeaderLen {
			l := int32(binary.BigEndian.Uint32(b[n:]))
			if l < 0 || l > store.MaxRecordBody {
				return fmt.Errorf("%w: record length %d at offset %d", store.ErrCorrupt, l, off+int64(n))
			}
			end := n + store.RecordHeaderLen + int(l)
			if end > len(b) {
				if n == 0 {
					need = end
				}
				break
			}
			body := b[n+store.RecordHeaderLen : end]
			if binary.BigEndian.Uint32(b[n+4:]) == store.RecordChecksum(body) {
				fn(int64(binary.BigEndian.Uint64(b[n+8:])), off+int64(end))
			} else {
				log.Error("SAMSA: corrupt record left out of offset recovery", "partition", tp.String(), "offset", off+int64(n))
			}
			n = end
		}
		if n == 0 {
			if need > size {
				size = need // one record larger than the read: read it whole
				continue
			}
			return fmt.Errorf("%w: no whole record at offset %d", store.ErrCorrupt, off)
		}
		off += int64(n)
		size = scanBytes
	}
	return nil
}

// recoverSamsaOffsets runs the recovery when this is a samsa master with
// recoverOffset=true (see Samsa and gregor in broker/wire/doc.go). Start calls it before the broker starts,
// so nothing is registered in ZooKeeper, and no put changes the partitions,
// until the saved offsets fit this broker's store. A failure stops the
// start: registering with offsets that do not fit would make consumers skip
// or repeat messages, and a second run is harmless.
func (b *Bundle) recoverSamsaOffsets(ctx context.Context) error {
	if b.Samsa == nil || !b.Samsa.RecoverOffset {
		return nil
	}
	if b.Registry == nil {
		b.log.Warn("SAMSA: recoverOffset is set but ZooKeeper is disabled; nothing to recover")
		return nil
	}
	cfg := b.Config()
	workers := 1
	if b.Samsa.RecoverParallel {
		workers = b.Samsa.RecoverParallelHint
		if workers == 0 {
			workers = runtime.NumCPU()
		}
	}
	_, err := recoverOffsets(ctx, b.Registry, b.Store, cfg.System.BrokerID,
		recoverTargets(cfg, b.Store), workers, b.log)
	if err != nil {
		return fmt.Errorf("bundle: samsa recoverOffset: %w", err)
	}
	if b.afterRecover != nil {
		b.afterRecover()
	}
	return nil
}
