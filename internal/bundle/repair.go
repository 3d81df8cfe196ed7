package bundle

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"metaq/broker"
	"metaq/broker/store"
	"metaq/broker/wire"
)

// RepairFrom fills the damaged ranges of one partition of st with the
// records a replica still holds: each range is fetched with MetaQ `get`s
// from addr (the replica's MetaQ port), checked record by record (framing
// and checksum) and written back with store.Repair at the offsets the
// replica has them at, which are the master's (replication keeps offsets).
// Where the replica lacks part of a range too (its end comes first, or it
// lost records there itself) that part stays damaged and err says so. It
// returns the ranges repaired.
func RepairFrom(ctx context.Context, st *store.Store, addr, topic string, partition int) ([]store.Damage, error) {
	var done []store.Damage
	var errs []error
	for _, d := range st.Damaged() {
		if d.Topic != topic || d.Partition != partition {
			continue
		}
		pieces, err := fetchRange(ctx, addr, topic, partition, d.From, d.To)
		for _, pc := range pieces {
			if rerr := st.Repair(ctx, topic, partition, pc.off, pc.records); rerr != nil {
				err = errors.Join(err, rerr)
				continue
			}
			done = append(done, store.Damage{Topic: topic, Partition: partition, From: pc.off, To: pc.off + int64(len(pc.records))})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("range [%d, %d): %w", d.From, d.To, err))
		}
	}
	return done, errors.Join(errs...)
}

// repairGetBytes bounds one get of a repair.
const repairGetBytes = 1 << 20

// piece is a run of whole records fetched for a repair, at offset off.
type piece struct {
	off     int64
	records []byte
}

// fetchRange gets the whole records of [from, to) of a partition that the
// broker at addr holds, as runs; err names what it lacks.
func fetchRange(ctx context.Context, addr, topic string, partition int, from, to int64) ([]piece, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("repair: dial replica: %w", err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	dec := wire.NewDecoder(bufio.NewReader(c))
	var out []piece
	var cur *piece
	var missing []string
	for off := from; off < to; {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		get := &wire.Get{Topic: topic, Group: broker.RepairGroup, Partition: int32(partition), Offset: off,
			MaxSize: int32(min(to-off, repairGetBytes)), Opaque: 1}
		if _, err := c.Write(get.AppendTo(nil)); err != nil {
			return out, fmt.Errorf("repair: get from replica %s: %w", addr, err)
		}
		cmd, err := dec.Decode()
		if err != nil {
			return out, fmt.Errorf("repair: read from replica %s: %w", addr, err)
		}
		switch a := cmd.(type) {
		case *wire.Value:
			n := wholeRecords(a.Data, to-off)
			if n == 0 {
				return out, fmt.Errorf("repair: replica %s sent no whole record at %d", addr, off)
			}
			if _, err := store.VerifyRecords(a.Data[:n]); err != nil {
				return out, fmt.Errorf("repair: replica %s at %d: %w", addr, off, err)
			}
			if cur == nil || cur.off+int64(len(cur.records)) != off {
				out = append(out, piece{off: off})
				cur = &out[len(out)-1]
			}
			cur.records = append(cur.records, a.Data[:n]...)
			off += int64(n)
		case *wire.Result:
			next := int64(-1)
			if a.Code == wire.StatusMoved {
				next, _ = strconv.ParseInt(strings.TrimSpace(string(a.Body)), 10, 64)
			}
			if next <= off {
				// the replica ends here (404), or has nothing better to offer
				missing = append(missing, fmt.Sprintf("[%d, %d) (%d %s)", off, to, a.Code, a.Body))
				off = to
				continue
			}
			// the replica lost these records too: go on after them
			missing = append(missing, fmt.Sprintf("[%d, %d)", off, min(next, to)))
			off = next
		default:
			return out, fmt.Errorf("repair: unexpected answer %T from replica %s", cmd, addr)
		}
	}
	if len(missing) > 0 {
		return out, fmt.Errorf("repair: replica %s lacks %s", addr, strings.Join(missing, ", "))
	}
	return out, nil
}

// wholeRecords returns the length of the leading whole records of b that
// end at or before limit.
func wholeRecords(b []byte, limit int64) int {
	n := 0
	for int64(n) < limit {
		_, l, err := store.DecodeRecord(b[n:])
		if err != nil || int64(n+l) > limit {
			break
		}
		n += l
	}
	return n
}
