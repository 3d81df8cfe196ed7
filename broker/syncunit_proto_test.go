package broker

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// unitOf is a sync unit of one message per body, in partition parts[i].
func unitOf(opaque int32, parts []int32, bodies ...string) *wire.SyncUnit {
	u := &wire.SyncUnit{Opaque: opaque}
	for i, b := range bodies {
		u.Syncs = append(u.Syncs, wire.Sync{Topic: "test", Partition: parts[i], MsgID: int64(1000 + i), Checksum: wire.Checksum([]byte(b)), Body: []byte(b)})
	}
	return u
}

// TestSyncUnitsOffered: a sync slave answers `stats sync_units` with the
// largest unit it takes (its MaxMessageSize); a plain broker answers the
// statistics of a topic of that name, as MetaQ does, without that line,
// and answers a sync unit 503 as it answers sync, keeping the connection.
func TestSyncUnitsOffered(t *testing.T) {
	cfg := vectorConfig(t)
	slave := startBroker(t, cfg, func(o *Options) { o.SyncReceiver = true; o.MaxMessageSize = 1 << 20 })
	plain := startBroker(t, cfg, nil)
	for _, c := range []struct {
		b    *testBroker
		want int
	}{{slave, 1 << 20}, {plain, 0}} {
		cl := dial(t, c.b.Addr())
		cl.sendCmd(&wire.Stats{Item: syncUnitsItem, HasItem: true, Opaque: 7, HasOpaque: true})
		r := cl.result()
		if got := syncUnitBytes(r); got != c.want {
			t.Fatalf("stats sync_units answered %q: %d bytes, want %d", r.Body, got, c.want)
		}
	}
	cl := dial(t, plain.Addr())
	cl.sendCmd(unitOf(3, []int32{0}, "a"))
	if r := cl.result(); r.Code != wire.StatusServiceUnavailable || r.Opaque != 3 {
		t.Fatalf("a plain broker answered a sync unit %s", r)
	}
	cl.sendCmd(&wire.Version{Opaque: 4})
	if r := cl.result(); !r.OK() || r.Opaque != 4 {
		t.Fatalf("version after the refused unit: %s", r)
	}
}

// TestSyncUnitBytesOfMetaQ: the MetaQ 1.4.6 Java broker's answer to
// `stats sync_units 0`, as it sent it (a topic's statistics), offers no
// units; the same broker closed the connection on a syncunit frame,
// logging "MetaCodecException: Expect sync,but was syncunit".
func TestSyncUnitBytesOfMetaQ(t *testing.T) {
	java := "STATS\r\nsync_units\r\nresultCode 1\r\npartitions 0\r\nmessage_count 0\r\nbytes 0\r\n" +
		"topic_realtime_put null\r\ntopic_realtime_get null\r\ntopic_realtime_offset null\r\ntopic_realtime_get_miss null\r\n" +
		"topic_realtime_put_failed null\r\ntopic_realtime_message_size null\r\nEND\r\n"
	for _, c := range []struct {
		name string
		r    *wire.Result
		want int
	}{
		{"metaq", wire.NewResult(wire.StatusOK, java, 0), 0},
		{"ours", wire.NewResult(wire.StatusOK, "STATS\r\nsync_units 1048576\r\nEND\r\n", 0), 1 << 20},
		{"refused", wire.NewResult(wire.StatusInternalServerError, "STATS\r\nsync_units 5\r\nEND\r\n", 0), 0},
		{"zero", wire.NewResult(wire.StatusOK, "STATS\r\nsync_units 0\r\nEND\r\n", 0), 0},
	} {
		if got := syncUnitBytes(c.r); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestSyncUnitStoredWholeOrRefused: a sync slave stores a unit whose
// messages all pass the checks as one unit of its log, under the master's
// ids, answering once with the number of messages; a unit with one
// message it refuses (a closed partition, a bad checksum) is answered
// with that refusal and nothing of it is stored.
func TestSyncUnitStoredWholeOrRefused(t *testing.T) {
	slave := startBroker(t, vectorConfig(t), func(o *Options) { o.SyncReceiver = true })
	cl := dial(t, slave.Addr())

	slave.ClosePartitions("test", 1, 1)
	cl.sendCmd(unitOf(1, []int32{0, 1}, "closed-a", "closed-b"))
	if r := cl.result(); r.Code != wire.StatusForbidden || !strings.Contains(string(r.Body), "has been closed") {
		t.Fatalf("unit into a closed partition: %s", r)
	}
	slave.OpenPartitions("test", 1, 1)
	bad := unitOf(2, []int32{0, 1}, "bad-a", "bad-b")
	bad.Syncs[1].Checksum++
	cl.sendCmd(bad)
	if r := cl.result(); r.Code != wire.StatusInternalServerError || !strings.Contains(string(r.Body), txtChecksum) {
		t.Fatalf("unit with a bad checksum: %s", r)
	}
	if got := commitCounts(t, slave.store); len(got) != 0 {
		t.Fatalf("refused units left %v in the slave", got)
	}

	cl.sendCmd(unitOf(3, []int32{0, 1, 0}, "ok-a", "ok-b", "ok-c"))
	if r := cl.result(); !r.OK() || string(r.Body) != "3" || r.Opaque != 3 {
		t.Fatalf("unit: %s", r)
	}
	var ids []int64
	for p := range 2 {
		data, err := slave.store.Read("test", p, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		recs, _ := parseRecords(t, data)
		for _, r := range recs {
			ids = append(ids, r.id)
		}
	}
	if len(ids) != 3 || ids[0] != 1000 || ids[1] != 1002 || ids[2] != 1001 {
		t.Fatalf("the slave holds ids %v, want 1000 1002 (partition 0) 1001 (partition 1)", ids)
	}
	if units := logUnits(t, slave); units != 1 {
		t.Fatalf("the slave's log holds %d units, want 1", units)
	}
}

// metaqSlave is a stand-in for a MetaQ 1.4.6 gregor slave: it answers
// stats as MetaQ answers an unknown item (a topic's statistics) and every
// sync 200, and closes the connection without an answer on any other
// command word starting with s, as MetaQ's decoder does ("Expect sync").
type metaqSlave struct {
	mu    sync.Mutex
	syncs int
	units int
}

func (m *metaqSlave) serve(c net.Conn) {
	d := wire.NewDecoder(bufio.NewReader(c))
	for {
		cmd, err := d.Decode()
		if err != nil {
			return
		}
		var answer []byte
		switch x := cmd.(type) {
		case *wire.Stats:
			body := "STATS\r\n" + x.Item + "\r\nresultCode 1\r\npartitions 0\r\nmessage_count 0\r\nbytes 0\r\nEND\r\n"
			answer = wire.AppendResult(nil, wire.StatusOK, body, x.Opaque)
		case *wire.Sync:
			m.mu.Lock()
			m.syncs++
			m.mu.Unlock()
			answer = wire.AppendResult(nil, wire.StatusOK, strconv.FormatInt(x.MsgID, 10)+" "+strconv.Itoa(int(x.Partition))+" 0", x.Opaque)
		default:
			m.mu.Lock()
			m.units++
			m.mu.Unlock()
			return // MetaCodecException: gecko closes the session
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

func (m *metaqSlave) counts() (syncs, units int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.syncs, m.units
}

// TestSamsaCommitToMetaQSlave: a samsa master whose slave offers no sync
// units (MetaQ's) sends it a commit as one sync per message, exactly as
// before units, and never a syncunit, which would close the connection.
func TestSamsaCommitToMetaQSlave(t *testing.T) {
	ms := &metaqSlave{}
	addr := testutil.ServeTCP(t, ms.serve)
	master := startBroker(t, vectorConfig(t), func(o *Options) {
		o.SyncSlave = addr
		o.SyncTimeout = 10 * time.Second
	})
	for i := range 3 {
		if err := commit(context.Background(), master.Broker, commitAppends("m"+strconv.Itoa(i), 2, 100)); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
	if syncs, units := ms.counts(); syncs != 12 || units != 0 {
		t.Fatalf("the MetaQ slave got %d syncs and %d other commands, want 12 syncs and nothing else", syncs, units)
	}
}
