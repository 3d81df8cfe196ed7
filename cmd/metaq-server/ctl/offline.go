package ctl

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"metaq/broker/config"
	"metaq/broker/store"
)

// openOffline opens the store of a server that must not be running.
func openOffline(cfg *config.Server, pidFile string) (*store.Store, error) {
	if pid, err := ReadPID(pidFile); err == nil {
		return nil, fmt.Errorf("ctl: the server is running (pid %d): stop it first, the data directory has one owner", pid)
	}
	st, err := store.Open(store.Options{Dir: cfg.System.DataPath, SegmentBytes: cfg.System.MaxSegmentSize, BrokerID: cfg.System.BrokerID})
	if err != nil {
		return nil, fmt.Errorf("ctl: open store %s: %w", cfg.System.DataPath, err)
	}
	return st, nil
}

// DeletePartitions removes partitions start..end of topic from a stopped
// server's store (DeletePartitionFiles). Missing partitions are skipped.
func DeletePartitions(cfg *config.Server, pidFile, topic string, start, end int, logf func(string, ...any)) (err error) {
	st, err := openOffline(cfg, pidFile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	for p := start; p <= end; p++ {
		if _, perr := st.Partition(topic, p); errors.Is(perr, store.ErrNoPartition) {
			logf("%s-%d: no data, skipped", topic, p)
			continue
		}
		if err := st.DeletePartition(topic, p); err != nil {
			return fmt.Errorf("ctl: delete %s-%d: %w", topic, p, err)
		}
		logf("%s-%d: deleted", topic, p)
	}
	return nil
}

// MovePartitions renumbers partitions start..end of topic by offset on a
// stopped server (MovePartitionFiles), e.g. to free numbers before another
// broker's partitions are merged in. Records keep their bytes, ids and
// offsets; the old partitions are deleted once copied. A target that already
// exists stops the move before anything changes.
func MovePartitions(ctx context.Context, cfg *config.Server, pidFile, topic string, start, end, offset int, logf func(string, ...any)) (err error) {
	if offset == 0 {
		return errors.New("ctl: move-partitions needs a non-zero -offset")
	}
	st, err := openOffline(cfg, pidFile)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	moves := make([][2]int, 0, end-start+1)
	for p := start; p <= end; p++ {
		if _, err := st.Partition(topic, p); errors.Is(err, store.ErrNoPartition) {
			continue
		}
		to := p + offset
		if to < 0 {
			return fmt.Errorf("ctl: %s-%d would move to partition %d", topic, p, to)
		}
		moving := to >= start && to <= end
		if _, err := st.Partition(topic, to); err == nil && !moving {
			return fmt.Errorf("ctl: target %s-%d already exists", topic, to)
		}
		moves = append(moves, [2]int{p, to})
	}
	// Move away from the direction of the shift, so a target inside the range
	// is already empty when we reach it.
	if offset > 0 {
		for i, j := 0, len(moves)-1; i < j; i, j = i+1, j-1 {
			moves[i], moves[j] = moves[j], moves[i]
		}
	}
	for _, m := range moves {
		if err := copyPartition(ctx, st, topic, m[0], m[1]); err != nil {
			return err
		}
		if err := st.DeletePartition(topic, m[0]); err != nil {
			return fmt.Errorf("ctl: delete %s-%d after copy: %w", topic, m[0], err)
		}
		logf("%s-%d -> %s-%d", topic, m[0], topic, m[1])
	}
	return st.Flush()
}

func copyPartition(ctx context.Context, st *store.Store, topic string, from, to int) error {
	info, err := st.Partition(topic, from)
	if err != nil {
		return fmt.Errorf("ctl: %s-%d: %w", topic, from, err)
	}
	if err := st.CreatePartition(topic, to, info.Min); err != nil {
		return fmt.Errorf("ctl: create %s-%d: %w", topic, to, err)
	}
	pos := info.Min
	for pos < info.Max {
		chunk, err := st.Read(topic, from, pos, 1<<20)
		if err != nil {
			return fmt.Errorf("ctl: read %s-%d at %d: %w", topic, from, pos, err)
		}
		n := wholeRecords(chunk)
		if n == 0 {
			return fmt.Errorf("ctl: %s-%d at %d: no whole record in %d bytes", topic, from, pos, len(chunk))
		}
		next, err := st.AppendRaw(ctx, topic, to, pos, chunk[:n])
		if err != nil {
			return fmt.Errorf("ctl: write %s-%d at %d: %w", topic, to, pos, err)
		}
		pos = next
	}
	return nil
}

// wholeRecords returns the length of the leading run of whole records in b.
// A record is a 20-byte header (msgLen int32, checksum int32, id int64, flag
// int32) followed by msgLen bytes (see Records in broker/wire/doc.go); AppendRaw verifies them.
func wholeRecords(b []byte) int {
	n := 0
	for len(b)-n >= 20 {
		l := int(int32(binary.BigEndian.Uint32(b[n:])))
		if l < 0 || len(b)-n-20 < l {
			break
		}
		n += 20 + l
	}
	return n
}
