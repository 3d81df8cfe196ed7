package bundle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"metaq/broker/registry"
	"metaq/broker/store"
	"metaq/internal/testutil"
)

// TestOffsetMatcher: each saved value ends on the last record, in log
// order, whose id is at or below its msgId (see Samsa and gregor in broker/wire/doc.go).
func TestOffsetMatcher(t *testing.T) {
	t.Parallel()
	// The third record has a lower id than the second: the log order
	// decides, as in MetaQ's loop, not the largest id.
	recs := []struct{ id, end int64 }{{10, 30}, {30, 60}, {20, 90}, {40, 120}}
	saved := []savedOffset{
		{Path: "beyond", MsgID: 99, Offset: 7},   // after the last record
		{Path: "between", MsgID: 25, Offset: 1},  // 20 (third record) is the last <= 25
		{Path: "exact", MsgID: 30, Offset: 2},    // ids 10, 30, 20 are <= 30: the third record
		{Path: "right", MsgID: 40, Offset: 120},  // already right
		{Path: "before", MsgID: 5, Offset: 3},    // before every record
		{Path: "neg", MsgID: -77, Offset: 4},     // also before
		{Path: "first", MsgID: 10, Offset: 30},   // right on the first record
		{Path: "first2", MsgID: 12, Offset: 999}, // moves to the first record
	}
	m := newOffsetMatcher(saved)
	for _, r := range recs {
		m.add(r.id, r.end)
	}
	want := map[string][3]int64{ // msgId, offset, 1 if unchanged
		"beyond":  {40, 120, 0},
		"between": {20, 90, 0},
		"exact":   {20, 90, 0},
		"right":   {40, 120, 1},
		"before":  {-1, 0, 0},
		"neg":     {-1, 0, 0},
		"first":   {10, 30, 1},
		"first2":  {10, 30, 0},
	}
	got := m.changes()
	if len(got) != len(want) {
		t.Fatalf("%d changes, want %d", len(got), len(want))
	}
	for _, c := range got {
		w := want[c.Path]
		if c.MsgID != w[0] || c.Offset != w[1] || c.unchanged != (w[2] == 1) {
			t.Errorf("%s: %d-%d unchanged=%v, want %d-%d unchanged=%v", c.Path, c.MsgID, c.Offset, c.unchanged, w[0], w[1], w[2] == 1)
		}
		if c.reset != (w[0] == -1) {
			t.Errorf("%s: reset=%v", c.Path, c.reset)
		}
	}

	// An empty partition matches nothing: every value is reset.
	m = newOffsetMatcher([]savedOffset{{Path: "a", MsgID: 5, Offset: 9}})
	if c := m.changes(); len(c) != 1 || !c[0].reset || c[0].MsgID != -1 || c[0].Offset != 0 {
		t.Errorf("empty partition: %+v", c)
	}
}

func TestParseSavedOffset(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in     string
		ok     bool
		id, of int64
	}{
		{"6393882542080-58", true, 6393882542080, 58},
		{"-5468927451604189184-25", true, -5468927451604189184, 25},
		{" 12-3 \n", true, 12, 3},
		{"-1-25", false, 0, 0}, // never consumed here
		{"-1-0", false, 0, 0},
		{"17", false, 0, 0}, // before 1.4
		{"", false, 0, 0},
		{"x-1", false, 0, 0},
		{"5-y", false, 0, 0},
	} {
		s, ok := parseSavedOffset(tc.in)
		if ok != tc.ok || (ok && (s.MsgID != tc.id || s.Offset != tc.of)) {
			t.Errorf("%q: %+v %v", tc.in, s, ok)
		}
	}
}

// TestSamsaRecoverOffset starts a samsa master with recoverOffset=true on a
// store with known records and consumer offsets in the real ZooKeeper
// (see Samsa and gregor in broker/wire/doc.go): values beyond, between, on and at the end of the records
// move onto this store; values already right are not written; values in an
// empty partition or before every record become -1-0; pre-1.4 plain
// offsets, msgId -1 and other brokers' nodes stay; the broker registers only
// after the recovery, and a second start changes nothing.
func TestSamsaRecoverOffset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=rec]\nnumPartitions=3\n")
	ctx := context.Background()

	// The former gregor slave's store: partition 0 holds 30 records with
	// rising negative ids (as Java brokers make them), one larger than a
	// recovery read, over several 1 MiB segments; partition 2 holds 5;
	// partition 1 is empty.
	st, err := store.Open(store.Options{Dir: filepath.Join(e.dir, "data"), SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	const base = int64(-5468929237010350080)
	type rec struct{ id, end int64 }
	appendAll := func(p, n int, size func(k int) int) []rec {
		var out []rec
		for k := range n {
			id := base + int64(p)<<40 + int64(k)*4096
			body := bytes.Repeat([]byte{byte('a' + k%26)}, size(k))
			a, err := st.Append(ctx, "rec", p, []store.Message{{ID: id, Body: body}})
			if err != nil {
				t.Fatal(err)
			}
			if a[0].ID != id {
				t.Fatalf("stored id %d, want %d", a[0].ID, id)
			}
			out = append(out, rec{id, a[0].Offset + int64(store.RecordHeaderLen+len(body))})
		}
		return out
	}
	p0 := appendAll(0, 30, func(k int) int {
		if k == 15 {
			return scanBytes + 200<<10 // larger than one recovery read
		}
		return 100 + k*3000
	})
	p2 := appendAll(2, 5, func(k int) int { return 10 + k })
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	zk := zkClient(t, e)
	node := func(group string, p int) string {
		return e.root + "/consumers/" + group + "/offsets/rec/0-" + strconv.Itoa(p)
	}
	fmtOff := func(id, off int64) string { return registry.FormatOffset(id, off) }
	last := p0[len(p0)-1]
	type want struct{ path, before, after string }
	cases := []want{
		{node("beyond", 0), fmtOff(last.id+100, 5), fmtOff(last.id, last.end)},
		{node("between", 0), fmtOff(p0[10].id+7, 12345), fmtOff(p0[10].id, p0[10].end)},
		{node("exact", 0), fmtOff(p0[20].id, 3), fmtOff(p0[20].id, p0[20].end)},
		{node("big", 0), fmtOff(p0[15].id, 1), fmtOff(p0[15].id, p0[15].end)},
		{node("right", 0), fmtOff(p0[5].id, p0[5].end), fmtOff(p0[5].id, p0[5].end)},
		{node("atend", 0), fmtOff(last.id, last.end), fmtOff(last.id, last.end)},
		{node("before", 0), fmtOff(p0[0].id-1, 99), "-1-0"},
		{node("old", 0), "777", "777"},
		{node("never", 0), "-1-25", "-1-25"},
		{node("beyond", 1), fmtOff(last.id, 40), "-1-0"},
		{node("never", 1), "-1-10", "-1-10"},
		{node("old", 1), "12", "12"},
		{node("between", 2), fmtOff(p2[3].id+1, 0), fmtOff(p2[3].id, p2[3].end)},
		{node("blank", 2), "", ""},
		// Another broker's partition of the same topic is not this broker's.
		{e.root + "/consumers/between/offsets/rec/7-0", fmtOff(p0[10].id+7, 12345), fmtOff(p0[10].id+7, 12345)},
	}
	versions := map[string]int32{}
	for _, c := range cases {
		if err := zk.SetPersistent(ctx, c.path, []byte(c.before)); err != nil {
			t.Fatal(err)
		}
		_, st, err := zk.Get(ctx, c.path)
		if err != nil {
			t.Fatal(err)
		}
		versions[c.path] = st.Version
	}

	props := filepath.Join(e.dir, "samsa_master.properties")
	os.WriteFile(props, []byte("slave=127.0.0.1:"+strconv.Itoa(testutil.FreePort(t))+
		"\nrecoverOffset=true\nrecoverParallel=true\nrecoverParallelHint=2\n"), 0o644)
	startSamsa := func() *Bundle {
		b, err := New(Options{ConfigPath: e.ini, Mode: ModeSamsa, PluginPath: props, Logger: testutil.Logger(t, slog.LevelInfo),
			ListenAddr: "127.0.0.1:" + strconv.Itoa(e.port), AdminAddr: "off"})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		b.afterRecover = func() {
			ran = true
			// Recovered, and nothing registered yet.
			for _, p := range []string{"/brokers/ids/0/master", "/brokers/topics/rec/0-m", "/brokers/topics-pub/rec/0-m"} {
				if ok, _, err := zk.Exists(ctx, e.root+p); ok || err != nil {
					t.Errorf("%s registered before the offsets were recovered (%v)", p, err)
				}
			}
			if data, _, _ := zk.Get(ctx, cases[0].path); string(data) != cases[0].after {
				t.Errorf("recovery not done when it reported so: %s = %q", cases[0].path, data)
			}
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if !ran {
			t.Fatal("the recovery did not run")
		}
		return b
	}
	b := startSamsa()
	for _, p := range []string{"/brokers/ids/0/master", "/brokers/topics/rec/0-m", "/brokers/topics-pub/rec/0-m"} {
		if ok, _, err := zk.Exists(ctx, e.root+p); !ok || err != nil {
			t.Errorf("%s not registered after the recovery (%v)", p, err)
		}
	}
	for _, c := range cases {
		data, st, err := zk.Get(ctx, c.path)
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		if string(data) != c.after {
			t.Errorf("%s = %q, want %q (was %q)", c.path, data, c.after, c.before)
		}
		if written := st.Version != versions[c.path]; written != (c.before != c.after) {
			t.Errorf("%s: written=%v, want %v", c.path, written, c.before != c.after)
		}
		versions[c.path] = st.Version
	}

	// A consumer resuming from a recovered offset gets the next record.
	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mc.get("rec", "between", 0, p0[10].end, 1<<20)
	mc.Close()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := decodeRecords(rep.body, p0[10].end)
	if len(got) == 0 || got[0].id != p0[11].id {
		t.Errorf("get at the recovered offset: %d records, first %+v, want id %d", len(got), got, p0[11].id)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Running it again writes nothing.
	b = startSamsa()
	defer b.Close()
	for _, c := range cases {
		data, st, err := zk.Get(ctx, c.path)
		if err != nil || string(data) != c.after || st.Version != versions[c.path] {
			t.Errorf("second start: %s = %q v%d (%v), want %q v%d", c.path, data, st.Version, err, c.after, versions[c.path])
		}
	}
}

// failingNodes fails writes to one path.
type failingNodes struct {
	offsetNodes
	path string
}

func (f failingNodes) SetPersistent(ctx context.Context, path string, data []byte) error {
	if path == f.path {
		return errors.New("write refused")
	}
	return f.offsetNodes.SetPersistent(ctx, path, data)
}

// TestRecoverOffsetsErrors: a partition that fails is reported with its
// name, the others are still recovered, sequentially (one worker) too.
func TestRecoverOffsetsErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "")
	ctx := context.Background()
	st, err := store.Open(store.Options{Dir: filepath.Join(e.dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ends []int64
	for p := range 2 {
		a, err := st.Append(ctx, "t", p, []store.Message{{ID: 100, Body: []byte("x")}})
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, a[0].Offset+21)
	}
	zk := zkClient(t, e)
	for p := range 2 {
		if err := zk.SetPersistent(ctx, e.root+"/consumers/g/offsets/t/3-"+strconv.Itoa(p), []byte("150-0")); err != nil {
			t.Fatal(err)
		}
	}
	bad := e.root + "/consumers/g/offsets/t/3-0"
	parts := []topicPartition{{"t", 0}, {"t", 1}}
	res, err := recoverOffsets(ctx, failingNodes{zk, bad}, st, 3, parts, 1, testutil.Logger(t, slog.LevelInfo))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("partition t-0")) {
		t.Fatalf("err = %v", err)
	}
	if res.Moved != 1 || res.Partitions != 2 {
		t.Errorf("result %+v", res)
	}
	data, _, _ := zk.Get(ctx, e.root+"/consumers/g/offsets/t/3-1")
	if string(data) != registry.FormatOffset(100, ends[1]) {
		t.Errorf("t-1 = %q", data)
	}
	data, _, _ = zk.Get(ctx, bad)
	if string(data) != "150-0" {
		t.Errorf("t-0 = %q", data)
	}
}
