package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

func iniWith(t testing.TB, extra string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir, "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	return append(data, []byte(extra)...)
}

// mustPut puts body and returns id, partition, offset.
func mustPut(t testing.TB, cl *client, topic string, p int32, body string) (int64, int, int64) {
	t.Helper()
	cl.sendCmd(putCmd(topic, p, body, 1))
	r := cl.result()
	if !r.OK() {
		t.Fatalf("put %s-%d: %s", topic, p, r)
	}
	f := strings.Split(string(r.Body), " ")
	id, _ := strconv.ParseInt(f[0], 10, 64)
	part, _ := strconv.Atoi(f[1])
	off, _ := strconv.ParseInt(f[2], 10, 64)
	return id, part, off
}

func partitionEnd(t testing.TB, b *testBroker, topic string, p int) int64 {
	t.Helper()
	info, err := b.store.Partition(topic, p)
	if err != nil {
		return -1
	}
	return info.Max
}

// TestBadInput sends malformed frames: each closes its connection without
// an answer and with a log line, stores nothing, and leaves another
// connection working.
func TestBadInput(t *testing.T) {
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
		o.MaxMessageSize = 1 << 20
	})
	other := dial(t, brk.Addr())
	mustPut(t, other, "test", 0, "hello")
	end := partitionEnd(t, brk, "test", 0)

	cases := []struct{ name, in string }{
		{"unknown-command", "hello world 1\r\n"},
		{"leading-space", " put test 0 5 0 -1\r\nhello"},
		{"empty-line", "\r\n"},
		{"wrong-word", "putt test 0 5 0 1\r\nhello"},
		{"put-too-few-fields", "put test 0 5 0\r\nhello"},
		{"put-too-many-fields", "put test 0 5 0 1 TX:a:1 2 3\r\nhello"},
		{"put-bad-partition", "put test zero 5 0 1\r\nhello"},
		{"put-bad-opaque", "put test 0 5 0 x\r\nhello"},
		{"put-negative-size", "put test 0 -5 0 1\r\n"},
		{"put-absurd-size", "put test 0 2147483647 0 1\r\n"},
		{"put-over-max-size", "put test 0 1048577 0 1\r\n"},
		{"put-size-not-a-number", "put test 0 5x 0 1\r\nhello"},
		{"put-bad-txkey", "put test 0 5 0 1 FOO:1 2\r\nhello"},
		{"get-too-few-fields", "get test g 0 0 100\r\n"},
		{"get-bad-offset", "get test g 0 x 100 1\r\n"},
		{"offset-too-few-fields", "offset test g 0 1\r\n"},
		{"transaction-bad-type", "transaction TX:a:1 a START 1\r\n"},
		{"transaction-bad-key", "transaction TX:a s BEGIN 1\r\n"},
		{"sync-wrong-fields", "sync test 0 5 0 1\r\nhello"},
		{"stats-bad-opaque", "stats topics x\r\n"},
		{"tab-separated-get", "get\ttest g 0 0 100 1\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := dial(t, brk.Addr())
			cl.send([]byte(c.in))
			cl.expectClosed(3 * time.Second)
			if got := partitionEnd(t, brk, "test", 0); got != end {
				t.Fatalf("partition end moved from %d to %d", end, got)
			}
			// The other connection is unaffected.
			other.sendCmd(&wire.Version{Opaque: 5, HasOpaque: true})
			if r := other.result(); !r.OK() || r.Opaque != 5 {
				t.Fatalf("other connection: %v", r)
			}
		})
	}
	if !logs.contains("malformed request") {
		t.Fatal("no log line for malformed input")
	}
	// Stored data is intact.
	other.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 1024, Opaque: 9})
	v, ok := other.read().(*wire.Value)
	if !ok {
		t.Fatal("get after bad input did not answer value")
	}
	recs, rest := parseRecords(t, v.Data)
	if len(recs) != 1 || string(recs[0].body) != "hello" || len(rest) != 0 {
		t.Fatalf("stored data changed: %d records, %q", len(recs), v.Data)
	}
}

// TestBadBodies covers bodies shorter and longer than declared, and a bad
// checksum.
func TestBadBodies(t *testing.T) {
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(logs, nil)) })

	t.Run("short-body", func(t *testing.T) {
		cl := dial(t, brk.Addr())
		cl.send([]byte("put test 0 10 0 -1 1\r\nhello"))
		cl.nc.(*net.TCPConn).CloseWrite()
		cl.expectClosed(3 * time.Second)
		if end := partitionEnd(t, brk, "test", 0); end != -1 {
			t.Fatalf("a short body was stored (end %d)", end)
		}
		testutil.Eventually(t, 2*time.Second, 10*time.Millisecond, func() error {
			if !logs.contains("connection ended inside a frame") {
				return errors.New("no log line for a truncated frame")
			}
			return nil
		})
	})
	t.Run("short-body-waits", func(t *testing.T) {
		// A body not yet complete is waited for, not answered.
		cl := dial(t, brk.Addr())
		cl.send([]byte("put test 1 10 0 -1 1\r\nhello"))
		cl.expectSilence(300 * time.Millisecond)
		cl.send([]byte("world"))
		if r := cl.result(); !r.OK() || !strings.HasSuffix(string(r.Body), " 1 0") {
			t.Fatalf("completed put: %s", r)
		}
	})
	t.Run("long-body", func(t *testing.T) {
		// The declared 3 bytes are the body; "lo" is then read as a command
		// line, which is malformed: answer, then close.
		cl := dial(t, brk.Addr())
		cl.send([]byte("put test 0 3 0 -1 7\r\nhello\r\n"))
		r := cl.result()
		if !r.OK() || r.Opaque != 7 {
			t.Fatalf("put: %s", r)
		}
		cl.expectClosed(3 * time.Second)
		cl2 := dial(t, brk.Addr())
		cl2.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100, Opaque: 1})
		v := cl2.read().(*wire.Value)
		recs, _ := parseRecords(t, v.Data)
		if len(recs) != 1 || string(recs[0].body) != "hel" {
			t.Fatalf("stored %q", v.Data)
		}
	})
	t.Run("bad-checksum", func(t *testing.T) {
		cl := dial(t, brk.Addr())
		before := partitionEnd(t, brk, "test", 0)
		cl.send([]byte("put test 0 5 0 12345 3\r\nhello"))
		r := cl.result()
		if r.Code != 500 || !strings.Contains(string(r.Body), "Checksum failure") {
			t.Fatalf("got %s", r)
		}
		if !logs.contains("checksum mismatch") {
			t.Fatal("no log line for a bad checksum")
		}
		if partitionEnd(t, brk, "test", 0) != before {
			t.Fatal("bad-checksum message stored")
		}
		// The connection stays usable.
		mustPut(t, cl, "test", 0, "ok")
	})
	if !strings.Contains(brk.Stats(""), "put_failed 1\r\n") {
		t.Fatalf("put_failed not counted:\n%s", brk.Stats(""))
	}
}

// TestAbsurdSizeNotRead checks that a declared body above the limit closes
// the connection at once, without waiting for (or reading) the body.
func TestAbsurdSizeNotRead(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.MaxMessageSize = 4096 })
	cl := dial(t, brk.Addr())
	// The body is never sent: the close cannot have waited for it.
	cl.send([]byte("put test 0 4097 0 -1 1\r\n"))
	cl.expectClosed(5 * time.Second)
	// At the limit is accepted.
	cl = dial(t, brk.Addr())
	body := strings.Repeat("x", 4096)
	mustPut(t, cl, "test", 0, body)
}

// stallingRegistry is a registry where topic could not be registered at
// start and, once armed, registering it again hangs until release is
// closed: what ZooKeeper trouble does to a topic's first put.
func stallingRegistry(topic string) (reg *fakeRegistry, arm func(), release chan struct{}) {
	release = make(chan struct{})
	var armed atomic.Bool
	reg = &fakeRegistry{register: func(name string) error {
		if name != topic {
			return nil
		}
		if !armed.Load() {
			return errors.New("zookeeper unavailable")
		}
		<-release
		return nil
	}}
	return reg, func() { armed.Store(true) }, release
}

// TestPipelinedOutOfOrder sends several requests in one write; the first
// put waits (its topic's registration hangs), so the later ones are
// answered before it, each with its own opaque.
func TestPipelinedOutOfOrder(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=slow]\nnumPartitions=1\n"))
	reg, arm, release := stallingRegistry("slow")
	brk := startBroker(t, cfg, func(o *Options) { o.Registry = reg })
	arm()
	cl := dial(t, brk.Addr())
	var buf []byte
	buf = putCmd("slow", 0, "first", 101).AppendTo(buf)
	buf = putCmd("test", 0, "second", 102).AppendTo(buf)
	buf = (&wire.Version{Opaque: 103, HasOpaque: true}).AppendTo(buf)
	buf = (&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 100, Opaque: 104}).AppendTo(buf)
	buf = (&wire.Stats{Item: "offsets", Opaque: 105}).AppendTo(buf)
	cl.send(buf)

	seen := map[int32]wire.Command{}
	for len(seen) < 3 {
		c := cl.read()
		seen[c.OpaqueID()] = c
	}
	if _, ok := seen[101]; ok {
		t.Fatal("held put answered before release")
	}
	// The get may race the put of "second": read the rest, then release.
	for len(seen) < 4 {
		c := cl.read()
		seen[c.OpaqueID()] = c
	}
	if _, ok := seen[101]; ok {
		t.Fatal("held put answered before release")
	}
	close(release)
	c := cl.read()
	if c.OpaqueID() != 101 {
		t.Fatalf("got opaque %d, want 101", c.OpaqueID())
	}
	if r := c.(*wire.Result); !r.OK() {
		t.Fatalf("held put: %s", r)
	}
	if r := seen[102].(*wire.Result); !r.OK() || !strings.HasSuffix(string(r.Body), " 0 0") {
		t.Fatalf("second put: %s", r)
	}
	if r := seen[103].(*wire.Result); string(r.Body) != Version {
		t.Fatalf("version: %s", r)
	}
}

// TestPutOrderAcrossRegistration: a partition's puts wait in a queue while
// its topic's first put registers it, and go straight to the store once it
// is registered; those sent during the switch keep their order.
func TestPutOrderAcrossRegistration(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=late]\nnumPartitions=1\n"))
	reg, arm, release := stallingRegistry("late")
	// The queued puts then take a while to reach the store, so the later
	// bursts arrive while the queue is still draining.
	var slowed atomic.Bool
	brk := startBroker(t, cfg, func(o *Options) {
		o.Registry = reg
		o.Store = &hookStore{Store: o.Store, append: func(topic string) error {
			if topic == "late" && slowed.CompareAndSwap(false, true) {
				time.Sleep(200 * time.Millisecond)
			}
			return nil
		}}
	})
	arm()
	cl := dial(t, brk.Addr())
	const n = 200
	var buf []byte
	for i := 1; i <= n/2; i++ {
		buf = putCmd("late", 0, fmt.Sprintf("m%03d", i), int32(i)).AppendTo(buf)
	}
	cl.send(buf)
	time.Sleep(50 * time.Millisecond) // the first put is registering the topic
	close(release)
	buf = buf[:0]
	for i := n/2 + 1; i <= n; i++ {
		buf = putCmd("late", 0, fmt.Sprintf("m%03d", i), int32(i)).AppendTo(buf)
		if i%10 == 0 {
			cl.send(buf) // in bursts, while the queue drains
			buf = buf[:0]
			time.Sleep(10 * time.Millisecond)
		}
	}
	offsets := make(map[int32]int64, n)
	for len(offsets) < n {
		r := cl.result()
		if !r.OK() {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		f := strings.Fields(string(r.Body))
		off, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			t.Fatalf("put %d answer %q", r.Opaque, r.Body)
		}
		offsets[r.Opaque] = off
	}
	for i := int32(2); i <= n; i++ {
		if offsets[i] <= offsets[i-1] {
			t.Fatalf("put %d stored at %d, before put %d at %d", i, offsets[i], i-1, offsets[i-1])
		}
	}
}

// TestSlowReader: a client that pipelines large gets and never reads is
// cut off after the write timeout, while another client keeps working.
func TestSlowReader(t *testing.T) {
	logs := &logCapture{t: t}
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		o.WriteTimeout = 3 * time.Second
		o.MaxInFlight = 8
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	fast := dial(t, brk.Addr())
	big := strings.Repeat("x", 512<<10)
	for range 4 {
		mustPut(t, fast, "test", 0, big)
	}
	slow := dial(t, brk.Addr())
	slow.nc.(*net.TCPConn).SetReadBuffer(4096)
	go func() {
		var buf []byte
		for i := range 200 {
			buf = (&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 1 << 20, Opaque: int32(i)}).AppendTo(buf[:0])
			slow.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
			if _, err := slow.nc.Write(buf); err != nil {
				return
			}
		}
	}()
	// Wait until the slow client's answers are stuck (its in-flight limit
	// is reached, so the broker holds answers it cannot write).
	cmdGet := func() int {
		for _, l := range strings.Split(brk.Stats(""), "\r\n") {
			if v, ok := strings.CutPrefix(l, "cmd_get "); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		return -1
	}
	last := -1
	testutil.Eventually(t, 10*time.Second, 200*time.Millisecond, func() error {
		n := cmdGet()
		if n < 8 || n != last {
			last = n
			return fmt.Errorf("slow client not stuck yet (%d gets)", n)
		}
		return nil
	})
	// Meanwhile the fast client is served: all its round trips complete
	// while the slow connection is still stuck, not after it is cut off.
	for i := range 20 {
		mustPut(t, fast, "test", 1, "m"+strconv.Itoa(i))
		fast.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 1, Offset: 0, MaxSize: 1 << 20, Opaque: 77})
		if _, ok := fast.read().(*wire.Value); !ok {
			t.Fatal("fast get failed")
		}
	}
	if logs.contains("does not read its answers") {
		t.Fatal("the fast client's requests waited for the slow client to be cut off")
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if !logs.contains("does not read its answers") {
			return errors.New("slow reader not cut off yet")
		}
		return nil
	})
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		if s := brk.Stats(""); !strings.Contains(s, "curr_connections 1\r\n") {
			return errors.New("connections: " + s)
		}
		return nil
	})
}

func TestClosedPartitions(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "a")
	if err := brk.ClosePartitions("test", 0, 1); err != nil {
		t.Fatal(err)
	}
	cl.sendCmd(putCmd("test", 1, "b", 2))
	r := cl.result()
	want := "Put message to [broker '" + brk.URL() + "'] [partition 'test-1'] failed.Detail:partition[0-1] has been closed"
	if r.Code != 403 || string(r.Body) != want {
		t.Fatalf("put: %s, want 403 %s", r, want)
	}
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100, Opaque: 3})
	r = cl.result()
	if r.Code != 403 || string(r.Body) != "Partition[0-0] has been closed" {
		t.Fatalf("get: %s", r)
	}
	brk.OpenPartitions("test", 0, 1)
	mustPut(t, cl, "test", 1, "b")
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 100, Opaque: 4})
	if _, ok := cl.read().(*wire.Value); !ok {
		t.Fatal("get after reopen")
	}
}

// TestClosePartitionsRefusesWhatIsNotThere: closing partitions of a topic
// the broker does not take, or past its last partition, is refused and
// closes nothing (a mistyped -end once meant one map entry per number up
// to it); reopening looks only at what is closed.
func TestClosePartitionsRefusesWhatIsNotThere(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	tc, ok := brk.Config().TopicFor("test")
	if !ok {
		t.Fatal("the vectors' config has no topic test")
	}
	n := tc.NumPartitions
	for _, c := range []struct {
		topic    string
		from, to int
		want     string
	}{
		{"nosuch", 0, 1, `no topic "nosuch"`},
		{"test", 0, 1 << 40, "outside them"},
		{"test", -1, 0, "outside them"},
		{"test", 1, 0, "outside them"},
		{"test", n, n, "outside them"},
	} {
		err := brk.ClosePartitions(c.topic, c.from, c.to)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ClosePartitions(%q, %d, %d) = %v, want an error with %q", c.topic, c.from, c.to, err, c.want)
		}
	}
	if brk.isClosed("test", 0) || brk.isClosed("nosuch", 0) {
		t.Fatal("a refused close closed a partition")
	}
	if err := brk.ClosePartitions("test", n-1, n-1); err != nil {
		t.Fatal(err)
	}
	brk.OpenPartitions("test", 0, 1<<40)
	if brk.isClosed("test", n-1) {
		t.Fatal("OpenPartitions over a wide range left the closed partition closed")
	}
}

func TestUpdateConsumerOffsets(t *testing.T) {
	cfg := parseConfig(t, bytes.Replace(iniWith(t, ""), []byte("updateConsumerOffsets=false"), []byte("updateConsumerOffsets=true"), 1))
	brk := startBroker(t, cfg, nil)
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "hello")
	for _, c := range []struct {
		off  int64
		code int
		body string
	}{{25, 404, "Could not find message at position 25"}, {26, 301, "25"}, {1000, 301, "25"}} {
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: c.off, MaxSize: 100, Opaque: 1})
		r := cl.result()
		if r.Code != c.code || string(r.Body) != c.body {
			t.Fatalf("get at %d: %s", c.off, r)
		}
	}
}

func TestMaxTransferSizeCap(t *testing.T) {
	cfg := parseConfig(t, bytes.Replace(iniWith(t, ""), []byte("maxTransferSize=1048576"), []byte("maxTransferSize=64"), 1))
	brk := startBroker(t, cfg, nil)
	cl := dial(t, brk.Addr())
	for range 5 {
		mustPut(t, cl, "test", 0, "0123456789")
	}
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, MaxSize: 1 << 20, Opaque: 1})
	v := cl.read().(*wire.Value)
	if len(v.Data) != 64 {
		t.Fatalf("value of %d bytes, want the 64-byte cap", len(v.Data))
	}
}

func TestReload(t *testing.T) {
	reg := &fakeRegistry{}
	cfg := vectorConfig(t)
	var hs *hookStore
	brk := startBroker(t, cfg, func(o *Options) {
		o.Registry = reg
		hs = &hookStore{Store: o.Store}
		o.Store = hs
	})
	if p, ok := hs.policy("test"); !ok || p.UnflushThreshold != 0 || p.MaxAge != 168*time.Hour {
		t.Fatalf("test policy at start: %+v %v", p, ok)
	}
	if n, ok := reg.topic("test"); !ok || n != 2 {
		t.Fatalf("test registered with %d (%v)", n, ok)
	}
	cl := dial(t, brk.Addr())
	cl.sendCmd(putCmd("fresh", 0, "x", 1))
	if r := cl.result(); r.Code != 500 || !strings.HasSuffix(string(r.Body), "The server do not accept topic fresh") {
		t.Fatalf("put before reload: %s", r)
	}
	cl.sendCmd(putCmd("test", 3, "x", 2))
	if r := cl.result(); r.Code != 500 || !strings.HasSuffix(string(r.Body), "wrong partition 3") {
		t.Fatalf("put before reload: %s", r)
	}

	data := bytes.Replace(cfg.Raw, []byte("[topic=test]\nnumPartitions=2"), []byte("[topic=test]\nnumPartitions=4\n\n[topic=fresh]\nnumPartitions=3\nunflushThreshold=5\ndeletePolicy=archive,24"), 1)
	newCfg := parseConfig(t, data)
	ch, err := brk.Reload(newCfg)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ch.TopicsAdded) != "[fresh]" || fmt.Sprint(ch.TopicsChanged) != "[test]" {
		t.Fatalf("changes %+v", ch)
	}
	if n, ok := reg.topic("fresh"); !ok || n != 3 {
		t.Fatalf("fresh registered with %d (%v)", n, ok)
	}
	if p, ok := hs.policy("fresh"); !ok || p.UnflushThreshold != 5 || p.MaxAge != 24*time.Hour || !p.Archive {
		t.Fatalf("fresh policy after reload: %+v %v", p, ok)
	}
	if n, _ := reg.topic("test"); n != 4 {
		t.Fatalf("test re-registered with %d", n)
	}
	if len(reg.checksums) != 1 || reg.checksums[0] != newCfg.Checksum {
		t.Fatalf("checksum updates %v", reg.checksums)
	}
	mustPut(t, cl, "fresh", 2, "x")
	mustPut(t, cl, "test", 3, "x")
	// stats config serves the new file.
	cl.sendCmd(&wire.Stats{Item: "config", HasItem: true, Opaque: 4})
	if r := cl.result(); !bytes.Equal(r.Body, data) {
		t.Fatal("stats config does not serve the reloaded file")
	}
	// A topic removed by a reload is unregistered and refused, as a topic
	// missing from server.ini.
	if _, err := brk.Reload(parseConfig(t, cfg.Raw)); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.topic("fresh"); ok {
		t.Error("removed topic fresh is still registered")
	}
	cl.sendCmd(putCmd("fresh", 1, "refused", 6))
	if r := cl.result(); r.Code == 200 {
		t.Fatalf("put to removed topic fresh accepted: %s", r)
	}
	cl.sendCmd(putCmd("test", 3, "x", 5))
	if r := cl.result(); r.Code != 500 {
		t.Fatalf("numPartitions back to 2, put to 3: %s", r)
	}
}

func TestStatsCounters(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.SlaveStats = fakeSlaveStats{} })
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "hello")
	mustPut(t, cl, "test", 0, "world")
	cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 50, MaxSize: 100, Opaque: 1})
	if r := cl.result(); r.Code != 404 {
		t.Fatalf("get at end: %s", r)
	}
	cl.sendCmd(&wire.Offset{Topic: "test", Group: "g", Partition: 0, Offset: 0, Opaque: 2})
	cl.result()
	sys := brk.Stats("")
	for _, want := range []string{"cmd_put 2\r\n", "cmd_get 1\r\n", "cmd_offset 1\r\n", "get_miss 1\r\n", "put_failed 0\r\n",
		"total_messages 2\r\n", "topics 1\r\n", "slave true\r\n", "curr_connections 1\r\n", "broker_id 0\r\n",
		"config_checksum " + strconv.FormatUint(uint64(brk.Config().Checksum), 10) + "\r\n"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system stats lack %q:\n%s", want, sys)
		}
	}
	rt := brk.Stats("realtime")
	if !strings.Contains(rt, "realtime_put Count=2,Value=2,Value/Count=1,") || !strings.Contains(rt, "realtime_message_size Count=2,Value=10,Value/Count=5,") {
		t.Errorf("realtime:\n%s", rt)
	}
	if !strings.Contains(rt, "realtime_put_failed null\r\n") {
		t.Errorf("realtime put_failed should be null:\n%s", rt)
	}
	tp := brk.Stats("test")
	if !strings.Contains(tp, "resultCode 0\r\npartitions 1\r\nmessage_count 2\r\nbytes 50\r\n") || !strings.Contains(tp, "topic_realtime_put Count=2,") {
		t.Errorf("topic stats:\n%s", tp)
	}
	if got := brk.Stats("nosuch"); !strings.Contains(got, "resultCode 1\r\n") || !strings.Contains(got, "topic_realtime_put Invalid keyTwo:nosuch\r\n") {
		t.Errorf("unknown topic stats:\n%s", got)
	}
	if got := brk.Stats("topics"); !strings.Contains(got, "test partitions 1 message_count 2 message_bytes 50 accept_publish true accept_subscribe true\r\n") {
		t.Errorf("topics:\n%s", got)
	}
	if got := brk.Stats("offsets"); !strings.Contains(got, "test part 0 min_offset 0 max_offset 50\r\n") {
		t.Errorf("offsets:\n%s", got)
	}
	if got := brk.Stats("config"); got != string(brk.Config().Raw) {
		t.Errorf("Stats(config) is not the config file")
	}
	if got := brk.Stats("slave"); got != "STATS\r\nmaster meta://127.0.0.1:1\r\npartitions 2\r\nfetching true\r\nEND\r\n" {
		t.Errorf("slave:\n%q", got)
	}
	brk.Stats("reset")
	if rt := brk.Stats("realtime"); !strings.Contains(rt, "realtime_put Count=0,Value=0,Value/Count=invalid,") {
		t.Errorf("after reset:\n%s", rt)
	}
}

func TestJavaDecimal(t *testing.T) {
	for in, want := range map[float64]string{1: "1", 0.5: "0.5", 2.0 / 3: "0.67", 0.03: "0.03", 100: "100", 0.001: "0"} {
		if got := javaDecimal(in); got != want {
			t.Errorf("javaDecimal(%v) = %q want %q", in, got, want)
		}
	}
}

func TestTransactionHook(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	cl.send([]byte("transaction TX:s:1 s BEGIN 1\r\n"))
	if r := cl.result(); r.Code != 500 || string(r.Body) != txtNoTransaction {
		t.Fatalf("no handler: %s", r)
	}
	cl.send([]byte("put test 0 5 0 907060870 TX:s:1 2\r\nhello"))
	if r := cl.result(); r.Code != 500 || string(r.Body) != txtNoTransaction {
		t.Fatalf("no handler, tx put: %s", r)
	}
	if partitionEnd(t, brk, "test", 0) != -1 {
		t.Fatal("transactional put stored without a handler")
	}
	rec := &recordingTx{}
	brk.SetTxHandler(rec)
	cl.send([]byte("transaction TX:s:1 s BEGIN 3\r\n"))
	if r := cl.result(); !r.OK() || r.Opaque != 3 {
		t.Fatalf("begin: %s", r)
	}
	cl.send([]byte("put test 0 5 0 907060870 TX:s:1 4\r\nhello"))
	if r := cl.result(); !r.OK() || r.Opaque != 4 {
		t.Fatalf("tx put: %s", r)
	}
	cl.send([]byte("transaction XID:1:aa:bb:uq s END uq 5\r\nversion 6\r\n"))
	if r := cl.result(); r.Opaque != 6 {
		t.Fatalf("END must not be answered; got opaque %d", r.Opaque)
	}
	if !strings.Contains(brk.Stats(""), "tx_begin 1\r\n") {
		t.Errorf("tx_begin not counted")
	}
	cl.nc.Close()
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if rec.closedCount() != 1 {
			return errors.New("ConnClosed not called")
		}
		return nil
	})
	if fmt.Sprint(rec.txs) != "[BEGIN TX:s:1 END XID:1:aa:bb:uq]" || fmt.Sprint(rec.puts) != "[TX:s:1]" {
		t.Fatalf("calls %v %v", rec.txs, rec.puts)
	}
}

func TestHealthAndStoreFailure(t *testing.T) {
	var hs *hookStore
	brk := startBroker(t, vectorConfig(t), func(o *Options) {
		hs = &hookStore{Store: o.Store}
		o.Store = hs
	})
	if err := brk.Health(); err != nil {
		t.Fatalf("health: %v", err)
	}
	hs.mu.Lock()
	hs.append = func(string) error { return errDiskFull }
	hs.health = errDiskFull
	hs.mu.Unlock()
	cl := dial(t, brk.Addr())
	cl.sendCmd(putCmd("test", 0, "x", 1))
	r := cl.result()
	if r.Code != 500 || string(r.Body) != "Put message to [broker '"+brk.URL()+"'] [partition 'test-0'] failed." {
		t.Fatalf("put on failing store: %s", r)
	}
	if err := brk.Health(); !errors.Is(err, errDiskFull) {
		t.Fatalf("health = %v", err)
	}
}

func TestCloseOrderAndIdempotence(t *testing.T) {
	reg := &fakeRegistry{}
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.Registry = reg })
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "x")
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); brk.Close() }()
	}
	wg.Wait()
	if reg.unreg != 1 || reg.brokers != 1 {
		t.Fatalf("registry calls: unregister %d register %d", reg.unreg, reg.brokers)
	}
	cl.expectClosed(2 * time.Second)
	if _, err := net.DialTimeout("tcp", brk.Addr().String(), time.Second); err == nil {
		t.Fatal("still accepting after Close")
	}
	if err := brk.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if !errors.Is(brk.Health(), ErrClosed) {
		t.Fatal("health after close")
	}
}

// TestRegistersListenerURL checks that the broker advertises the port it
// listens on, not serverPort, when the two differ (metaq-server -listen).
func TestRegistersListenerURL(t *testing.T) {
	reg := &fakeRegistry{}
	cfg := vectorConfig(t)
	cfg.System.HostName = "127.0.0.1"
	brk := startBroker(t, cfg, func(o *Options) { o.Registry = reg })
	port := brk.Addr().(*net.TCPAddr).Port
	if port == cfg.System.ServerPort {
		t.Fatalf("listener took serverPort %d; the test needs them to differ", port)
	}
	want := "meta://127.0.0.1:" + strconv.Itoa(port)
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if len(reg.urls) != 1 || reg.urls[0] != want {
		t.Fatalf("registered %q, want [%s]", reg.urls, want)
	}
	if brk.URL() != want {
		t.Fatalf("broker URL %q, want %s", brk.URL(), want)
	}
}

// TestUnmatchableTopicRegisteredAndRefused: MetaQ's integration tests
// configure [topic=!@#$%]. MetaQ registers every configured name in
// ZooKeeper, and accepts a put only for a topic some section's pattern
// matches; read as a pattern "!@#$%" matches nothing ('$' is an anchor), so
// its puts are refused with MetaQ's text, which SpecialCharTopicTest
// expects from the Java client.
func TestUnmatchableTopicRegisteredAndRefused(t *testing.T) {
	reg := &fakeRegistry{}
	cfg := parseConfig(t, iniWith(t, "\n[topic=!@#$%]\nnumPartitions=2\n\n[topic=order.created]\n"))
	brk := startBroker(t, cfg, func(o *Options) { o.Registry = reg })
	for topic, parts := range map[string]int{"!@#$%": 2, "order.created": 1} {
		if n, ok := reg.topic(topic); !ok || n != parts {
			t.Fatalf("%s registered %d %v, want %d partitions at start", topic, n, ok, parts)
		}
	}
	cl := dial(t, brk.Addr())
	cl.sendCmd(putCmd("!@#$%", 0, "x", 1))
	if r := cl.result(); r.Code != 500 || !strings.Contains(string(r.Body), "The server do not accept topic !@#$%") {
		t.Fatalf("put to !@#$%%: %s", r)
	}
	mustPut(t, cl, "order.created", 0, "x")
}

func TestFirstPutRegistersTopic(t *testing.T) {
	reg := &fakeRegistry{}
	cfg := parseConfig(t, iniWith(t, "\n[topic=pat-*]\nnumPartitions=3\n"))
	brk := startBroker(t, cfg, func(o *Options) { o.Registry = reg })
	if _, ok := reg.topic("pat-*"); ok {
		t.Fatal("a pattern section was registered as a topic")
	}
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "pat-one", 2, "x")
	if n, ok := reg.topic("pat-one"); !ok || n != 3 {
		t.Fatalf("pat-one registered %d %v", n, ok)
	}
}

// TestPipelinedPutsKeepOrder: puts a connection pipelines to one partition
// are stored in the order they were sent.
func TestPipelinedPutsKeepOrder(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	const n = 500
	var buf []byte
	for i := range n {
		buf = putCmd("test", int32(i%2), "m"+strconv.Itoa(i), int32(i)).AppendTo(buf)
	}
	cl.send(buf)
	offs := make([]int64, n)
	for range n {
		r := cl.result()
		if !r.OK() {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		f := strings.Split(string(r.Body), " ")
		offs[r.Opaque], _ = strconv.ParseInt(f[2], 10, 64)
	}
	for i := 2; i < n; i++ {
		if offs[i] <= offs[i-2] {
			t.Fatalf("put %d stored at %d, before put %d at %d", i, offs[i], i-2, offs[i-2])
		}
	}
	if !strings.Contains(brk.Stats(""), "cmd_put 500\r\n") {
		t.Fatal("cmd_put not counted per message")
	}
}

// TestGarbageConnections: connections sending random bytes and truncated
// frames, concurrently with a well-behaved producer, never disturb it: every
// message it put is stored exactly once and in order, and the broker stays
// healthy.
func TestGarbageConnections(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), func(o *Options) { o.MaxMessageSize = 64 << 10 })
	var seeds [][]byte
	for _, f := range []string{"put.txt", "get.txt", "stats.txt", "transaction.txt", "sync.txt"} {
		for _, vc := range loadVectorFile(t, f) {
			seeds = append(seeds, vc.c)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := uint64(g + 1)
			next := func() uint64 { rnd ^= rnd << 13; rnd ^= rnd >> 7; rnd ^= rnd << 17; return rnd }
			for {
				select {
				case <-stop:
					return
				default:
				}
				nc, err := net.Dial("tcp", brk.Addr().String())
				if err != nil {
					return
				}
				// A mutated vector frame: bytes flipped, cut short, or random.
				frame := append([]byte(nil), seeds[next()%uint64(len(seeds))]...)
				switch next() % 3 {
				case 0:
					for range 1 + next()%4 {
						frame[next()%uint64(len(frame))] = byte(next())
					}
				case 1:
					frame = frame[:next()%uint64(len(frame))]
				case 2:
					frame = make([]byte, 1+next()%200)
					for i := range frame {
						frame[i] = byte(next())
					}
				}
				nc.SetDeadline(time.Now().Add(200 * time.Millisecond))
				nc.Write(frame)
				io.Copy(io.Discard, nc)
				nc.Close()
			}
		}()
	}
	cl := dial(t, brk.Addr())
	const n = 200
	for i := range n {
		mustPut(t, cl, "test", 1, fmt.Sprintf("good-%03d", i))
	}
	close(stop)
	wg.Wait()
	var got []string
	var off int64
	for {
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 1, Offset: off, MaxSize: 1 << 20, Opaque: 1})
		v, ok := cl.read().(*wire.Value)
		if !ok {
			break
		}
		recs, _ := parseRecords(t, v.Data)
		for _, r := range recs {
			got = append(got, string(r.body))
			off += int64(20 + len(r.body))
		}
	}
	// Garbage may have produced valid puts to test-1 by chance (a mutated
	// vector put); only the good messages are checked for order and count.
	var good []string
	for _, s := range got {
		if strings.HasPrefix(s, "good-") {
			good = append(good, s)
		}
	}
	if len(good) != n {
		t.Fatalf("stored %d good messages, want %d", len(good), n)
	}
	for i, s := range good {
		if s != fmt.Sprintf("good-%03d", i) {
			t.Fatalf("message %d is %q", i, s)
		}
	}
	if err := brk.Health(); err != nil {
		t.Fatalf("health after garbage: %v", err)
	}
}

// TestReloadUnderLoad reloads repeatedly while a producer and a consumer
// run; the topic present in every version keeps working throughout.
func TestReloadUnderLoad(t *testing.T) {
	cfg := vectorConfig(t)
	alt := parseConfig(t, iniWith(t, "\n[topic=extra]\nnumPartitions=2\n"))
	brk := startBroker(t, cfg, func(o *Options) { o.Registry = &fakeRegistry{} })
	stop := make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		cl := dial(t, brk.Addr())
		for i := 0; ; i++ {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			cl.sendCmd(putCmd("test", int32(i%2), "x", int32(i)))
			if r := cl.result(); !r.OK() {
				errs <- fmt.Errorf("put during reload: %s", r)
				return
			}
			cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: int32(i % 2), MaxSize: 100, Opaque: 1})
			if _, ok := cl.read().(*wire.Value); !ok {
				errs <- errors.New("get during reload")
				return
			}
		}
	}()
	for i := range 30 {
		c := cfg
		if i%2 == 0 {
			c = alt
		}
		if _, err := brk.Reload(c); err != nil {
			t.Fatal(err)
		}
		brk.Stats("")
		brk.Stats("topics")
	}
	close(stop)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestStartContextCancelCloses: cancelling the context given to Start closes
// the broker (and does not deadlock waiting for its own watcher).
func TestStartContextCancelCloses(t *testing.T) {
	cfg := vectorConfig(t)
	st, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	b, err := New(Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0", Logger: testutil.Logger(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := b.Addr().String()
	cancel()
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return after the start context was cancelled")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("broker still accepts connections after its context was cancelled")
	}
}

func TestDefaultListenAddr(t *testing.T) {
	for _, c := range []struct {
		host string
		want string
	}{
		{"", ":8123"},
		{"127.0.0.1", "127.0.0.1:8123"},
		{"localhost", "localhost:8123"},
		{"[::1]", "[::1]:8123"},
		{"metaq-1.bj.example.net", ":8123"},
		{"198.51.100.7", ":8123"},
	} {
		if got := defaultListenAddr(c.host, 8123); got != c.want {
			t.Errorf("defaultListenAddr(%q) = %q, want %q", c.host, got, c.want)
		}
	}
}

// TestPutsAnsweredBeforeAPartialFrame: puts that arrived whole are stored
// and answered while the next frame is still incomplete (the reader hands
// puts to their queues before it blocks on the socket), so a client whose
// kernel holds back a frame's tail cannot stall its earlier puts.
func TestPutsAnsweredBeforeAPartialFrame(t *testing.T) {
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	var buf []byte
	for i := range 3 {
		buf = putCmd("test", int32(i%2), "whole "+strconv.Itoa(i), int32(i)).AppendTo(buf)
	}
	tail := putCmd("test", 0, "the partial one", 3).AppendTo(nil)
	cut := len(tail) - 5 // the header and part of the body
	cl.send(append(buf, tail[:cut]...))
	for range 3 {
		if r := cl.result(); !r.OK() || r.Opaque > 2 {
			t.Fatalf("answer before the partial frame completed: %s", r)
		}
	}
	cl.expectSilence(100 * time.Millisecond)
	cl.send(tail[cut:])
	if r := cl.result(); !r.OK() || r.Opaque != 3 {
		t.Fatalf("answer to the completed frame: %s", r)
	}
}

// stallFS holds every fdatasync while stalled is set, as a disk that stops
// answering does.
type stallFS struct {
	store.OSFS
	stalled atomic.Bool
	entered chan struct{} // a sync started while stalled
	release chan struct{} // closed to let held syncs return
}

type stallFile struct {
	store.File
	fs *stallFS
}

func (f *stallFS) OpenFile(name string, flag int, perm os.FileMode) (store.File, error) {
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return stallFile{file, f}, nil
}

func (f stallFile) Datasync() error {
	if f.fs.stalled.Load() {
		select {
		case f.fs.entered <- struct{}{}:
		default:
		}
		<-f.fs.release
	}
	return f.File.Datasync()
}

// startOnStallingDisk starts a broker on a store whose fdatasyncs a
// stallFS holds, puts one message (answered), and stalls the disk; the
// held syncs are let go when the test ends, and the store is closed.
func startOnStallingDisk(t *testing.T) (*Broker, *stallFS, *client) {
	t.Helper()
	cfg := vectorConfig(t)
	fs := &stallFS{entered: make(chan struct{}, 1), release: make(chan struct{})}
	st, err := store.Open(store.Options{Dir: t.TempDir(), BrokerID: cfg.System.BrokerID, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t.Cleanup(func() { close(fs.release) })
	b, err := New(Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0", Logger: testutil.Logger(t, slog.LevelDebug)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	cl := dial(t, b.Addr())
	cl.sendCmd(putCmd("test", 0, "before the stall", 1))
	if r := cl.result(); !r.OK() {
		t.Fatalf("put before the stall: %s", r)
	}
	fs.stalled.Store(true)
	return b, fs, cl
}

// closeWhileStalled waits until a group commit is held by the stalled
// disk, then checks that b's Close returns (within its grace period and
// 10 s more).
func closeWhileStalled(t *testing.T, b *Broker, fs *stallFS) {
	t.Helper()
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the stalled puts' group commit never started")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
	case <-time.After(closeGrace + 10*time.Second):
		t.Fatal("Close did not return while the disk was stalled")
	}
}

// TestCloseWithStalledDisk: a put waiting for a group commit that never
// returns is answered with an error (or its connection closed) once Close's
// grace period ends, and Close returns; the put is never acknowledged.
func TestCloseWithStalledDisk(t *testing.T) {
	b, fs, cl := startOnStallingDisk(t)
	cl.sendCmd(putCmd("test", 0, "during the stall", 2))
	closeWhileStalled(t, b, fs)
	cl.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	cmd, err := cl.d.Decode()
	if err == nil {
		if r, ok := cmd.(*wire.Result); !ok || r.OK() || r.Opaque != 2 {
			t.Fatalf("answer to the stalled put: %v, want an error result", cmd)
		}
	}
}

// TestCloseWithStalledDiskGroup: puts to two partitions that one read
// brings go to the store as one call; when the disk stalls under them,
// Close gives up waiting and returns (the batches of one store call are
// answered together, as one, which releases the wait of each), and an
// answer that still gets out is an error, one per put.
func TestCloseWithStalledDiskGroup(t *testing.T) {
	b, fs, cl := startOnStallingDisk(t)
	cl.send(putCmd("test", 1, "during the stall", 3).AppendTo(putCmd("test", 0, "during the stall", 2).AppendTo(nil)))
	closeWhileStalled(t, b, fs)
	seen := map[int32]bool{}
	for {
		cl.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		cmd, err := cl.d.Decode()
		if err != nil {
			break
		}
		r, ok := cmd.(*wire.Result)
		if !ok || r.OK() || (r.Opaque != 2 && r.Opaque != 3) || seen[r.Opaque] {
			t.Fatalf("answer to a stalled put: %v (answered before: %v), want one error result each", cmd, seen)
		}
		seen[r.Opaque] = true
	}
}

// countingStore counts the store calls of the put route.
type countingStore struct {
	*store.Store
	single, many atomic.Int32
}

func (s *countingStore) AppendAsync(ctx context.Context, topic string, partition int, msgs []store.Message, notify func([]store.Appended, error)) *store.PendingAppend {
	s.single.Add(1)
	return s.Store.AppendAsync(ctx, topic, partition, msgs, notify)
}

func (s *countingStore) AppendManyAsync(ctx context.Context, appends []store.PartitionAppend, notify func([]store.AppendOutcome)) {
	s.many.Add(1)
	s.Store.AppendManyAsync(ctx, appends, notify)
}

// TestPutsOverManyPartitionsOneStoreCall: the puts one read brings to many
// partitions reach the store together (one call per read, not one per
// partition), each answered with its own partition and offset, a refused
// one among them answered alone, and every stored message where its answer
// says.
func TestPutsOverManyPartitionsOneStoreCall(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, "\n[topic=wide]\nnumPartitions=64\n"))
	var cs *countingStore
	brk := startBroker(t, cfg, func(o *Options) {
		cs = &countingStore{Store: o.Store.(*store.Store)}
		o.Store = cs
	})
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "wide", 0, "first") // registers the topic
	cs.single.Store(0)
	cs.many.Store(0)
	const n = 60
	var buf []byte
	for i := range n {
		p := int32(i % 30)
		if i == 7 {
			p = 64 // out of range: refused
		}
		buf = putCmd("wide", p, "m"+strconv.Itoa(i), int32(i)).AppendTo(buf)
	}
	cl.send(buf)
	type stored struct {
		part int
		off  int64
	}
	got := map[int32]stored{}
	for range n {
		r := cl.result()
		if r.Opaque == 7 {
			if r.OK() {
				t.Fatalf("put to partition 64 of 64 accepted: %s", r)
			}
			continue
		}
		if !r.OK() {
			t.Fatalf("put %d: %s", r.Opaque, r)
		}
		f := strings.Split(string(r.Body), " ")
		part, _ := strconv.Atoi(f[1])
		off, _ := strconv.ParseInt(f[2], 10, 64)
		if part != int(r.Opaque)%30 {
			t.Fatalf("put %d answered partition %d", r.Opaque, part)
		}
		got[r.Opaque] = stored{part, off}
	}
	if len(got) != n-1 {
		t.Fatalf("%d puts answered as stored, want %d", len(got), n-1)
	}
	for opaque, s := range got {
		b, err := brk.store.Read("wide", s.part, s.off, 1<<10)
		if err != nil {
			t.Fatalf("put %d: read %d at %d: %v", opaque, s.part, s.off, err)
		}
		r, _, err := store.DecodeRecord(b)
		if err != nil || string(r.Body) != "m"+strconv.Itoa(int(opaque)) {
			t.Fatalf("put %d: at %d-%d found %q, %v", opaque, s.part, s.off, r.Body, err)
		}
	}
	// Counted once each, whether a batch or a whole read was answered.
	if rt := brk.Stats("realtime"); !strings.Contains(rt, "realtime_put Count=60,") {
		t.Errorf("realtime_put after 60 stored puts (1 + 59):\n%s", rt)
	}
	// One write of 60 puts arrives in one read, or a few.
	if single, many := cs.single.Load(), cs.many.Load(); single != 0 || many == 0 || many > 4 {
		t.Fatalf("store calls for %d puts over 30 partitions: %d AppendAsync, %d AppendManyAsync", n, single, many)
	}
}
