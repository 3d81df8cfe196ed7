package georeplicator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"metaq/broker/store"
)

func TestFrameRoundTripAndCorruption(t *testing.T) {
	payload := []byte("some payload bytes")
	var buf bytes.Buffer
	h := header{typ: typeData, codec: CodecNone, epoch: 3, seq: 42, rawLen: uint32(len(payload))}
	if _, err := writeFrame(&buf, h, payload, nil); err != nil {
		t.Fatal(err)
	}
	wire := buf.Bytes()
	f, err := readFrame(bytes.NewReader(wire), nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.typ != typeData || f.epoch != 3 || f.seq != 42 || f.rawLen != uint32(len(payload)) || !bytes.Equal(f.wire, payload) {
		t.Fatalf("frame %+v", f)
	}
	cases := []struct {
		name      string
		at        int
		headerBad bool
	}{
		{"magic", 0, true}, {"type", 1, true}, {"seq", 12, true}, {"length", 21, true},
		{"payload crc", 25, true}, {"header crc", 30, true}, {"payload first", headerLen, false},
		{"payload last", len(wire) - 1, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := bytes.Clone(wire)
			bad[c.at] ^= 0x10
			f, err := readFrame(bytes.NewReader(bad), nil)
			if !errors.Is(err, ErrCorruptFrame) {
				t.Fatalf("err %v", err)
			}
			// A good header with a bad payload keeps the stream in step
			// (typ set); a bad header does not.
			if (f.typ == 0) != c.headerBad {
				t.Fatalf("header bad %v, frame %+v", c.headerBad, f.header)
			}
		})
	}
	// Truncated stream.
	if _, err := readFrame(bytes.NewReader(wire[:len(wire)-3]), nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v", err)
	}
	// A header claiming a huge payload is rejected before any allocation.
	var hb [headerLen]byte
	(&header{typ: typeData, wireLen: maxFrameBytes + 1}).put(hb[:])
	if _, err := readFrame(bytes.NewReader(hb[:]), nil); !errors.Is(err, ErrCorruptFrame) {
		t.Fatalf("huge frame: %v", err)
	}
}

func sampleEntries(r *rand.Rand, n int) []store.LogEntry {
	var es []store.LogEntry
	seq := 0
	for i := 0; i < n; i++ {
		var recs []byte
		for j := 0; j < 1+r.IntN(5); j++ {
			seq++
			recs = append(recs, makeRecord(int64(seq), logLine(r, seq))...)
		}
		es = append(es, store.LogEntry{Topic: []string{"a", "orders", "logs"}[r.IntN(3)], Partition: r.IntN(4),
			Offset: r.Int64N(1 << 40), Records: recs, Time: time.UnixMilli(r.Int64N(1 << 42))})
	}
	return es
}

func TestCodecsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	logLike := encodeBatch(nil, 100, 200, 5, sampleEntries(r, 300))
	random := make([]byte, 200<<10)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	d, err := newDecoder()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, c := range []Codec{CodecNone, CodecZstd, CodecS2} {
		for name, src := range map[string][]byte{"json": logLike, "random": random, "empty": {}} {
			t.Run(c.String()+"/"+name, func(t *testing.T) {
				w, err := compress(c, nil, src)
				if err != nil {
					t.Fatal(err)
				}
				if name == "json" && c != CodecNone && len(w)*2 > len(src) {
					t.Errorf("%v: log-like data only shrank to %d of %d", c, len(w), len(src))
				}
				got, err := d.decompress(c, nil, w, len(src))
				if err != nil || !bytes.Equal(got, src) {
					t.Fatalf("round trip: %v", err)
				}
				if c == CodecNone || len(w) < 8 {
					return
				}
				bad := bytes.Clone(w)
				bad[len(bad)/2] ^= 0xff
				if got, err := d.decompress(c, nil, bad, len(src)); err == nil && bytes.Equal(got, src) {
					t.Fatal("corrupt compressed payload decoded to the original")
				} else if err != nil && !errors.Is(err, ErrCorruptFrame) {
					t.Fatalf("err %v", err)
				}
				if _, err := d.decompress(c, nil, w, len(src)+1); !errors.Is(err, ErrCorruptFrame) {
					t.Fatalf("wrong raw length accepted: %v", err)
				}
			})
		}
	}
	if _, err := ParseMode("lz4"); err == nil {
		t.Fatal("unknown mode accepted")
	}
	if m, _ := ParseMode(" ZSTD "); m != ModeZstd {
		t.Fatalf("mode %q", m)
	}
	if m, _ := ParseMode(""); m != ModeZstd {
		t.Fatalf("default mode %q", m)
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	h := hello{Version: 1, BrokerID: -1, SlaveID: 3, Group: "meta-slave-group", Codec: ModeAuto, Resume: -1,
		Window: 8 << 20, RateCap: 6_250_000, MaxDelay: 500 * time.Millisecond, WantConf: true,
		MasterLog: "abc", Generation: 4, Ends: []partEnd{{"t", 2, 77}}}
	if got, err := decodeHello(h.encode()); err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("hello %+v %v", got, err)
	}
	w := welcome{Version: 1, BrokerID: 7, Start: 123, First: 100, Durable: 999, Truncated: true, Keepalive: time.Second,
		LogID: "def", Generation: 5, ByEnds: true, PromotionEnds: []partEnd{{"t", 1, 99}}}
	if got, err := decodeWelcome(w.encode()); err != nil || !reflect.DeepEqual(got, w) {
		t.Fatalf("welcome %+v %v", got, err)
	}
	// A peer from before log identities sends neither tail.
	old := hello{Version: 1, BrokerID: 7, Group: "g", Resume: 5}
	ob := old.encode()
	ob = ob[:len(ob)-2-8-4-4] // drop the empty MasterLog, Generation, no Ends, no Features
	if got, err := decodeHello(ob); err != nil || !reflect.DeepEqual(got, old) {
		t.Fatalf("hello without tail %+v %v", got, err)
	}
	a := ack{Seq: 9, Applied: 1 << 40, Durable: 77, Echo: 5, Parts: []partEnd{{"t", 0, 10}, {"u", 1023, 1 << 35}}, Synced: 1 << 39}
	if got, err := decodeAck(a.encode()); err != nil || !reflect.DeepEqual(got, a) {
		t.Fatalf("ack %+v %v", got, err)
	}
	// A slave that predates Synced sends none: it reads as Durable.
	oldAck := a.encode()
	oldAck = oldAck[:len(oldAck)-8]
	want := a
	want.Synced = a.Durable
	if got, err := decodeAck(oldAck); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("ack without synced %+v %v", got, err)
	}
	k := keepalive{SentAt: 1, Durable: 2}
	if got, err := decodeKeepalive(k.encode()); err != nil || got != k {
		t.Fatalf("keepalive %+v %v", got, err)
	}
	es := sampleEntries(rand.New(rand.NewPCG(3, 4)), 20)
	b, err := decodeBatch(encodeBatch(nil, 10, 20, 30, es))
	if err != nil || b.Start != 10 || b.End != 20 || b.SentAt != 30 || len(b.Entries) != len(es) {
		t.Fatalf("batch %+v %v", b, err)
	}
	for i := range es {
		if !reflect.DeepEqual(b.Entries[i].Records, es[i].Records) || b.Entries[i].Offset != es[i].Offset ||
			b.Entries[i].Topic != es[i].Topic || !b.Entries[i].Time.Equal(es[i].Time) {
			t.Fatalf("entry %d differs", i)
		}
	}
	raw := encodeBatch(nil, 10, 20, 30, es)
	for _, cut := range []int{1, 30, len(raw) - 1} {
		if _, err := decodeBatch(raw[:cut]); err == nil {
			t.Fatalf("truncated batch (%d bytes) decoded", cut)
		}
	}
	if _, err := decodeHello([]byte{0, 1}); err == nil {
		t.Fatal("short hello decoded")
	}

	// Units (featureUnits) after the entries: kept by a round trip, and a
	// list that does not fit the entries is refused.
	es[2].Unit, es[10].Unit = 3, 10
	b, err = decodeBatch(encodeBatch(nil, 10, 20, 30, es))
	if err != nil {
		t.Fatal(err)
	}
	for i := range es {
		if b.Entries[i].Unit != es[i].Unit {
			t.Fatalf("entry %d: unit %d, sent %d", i, b.Entries[i].Unit, es[i].Unit)
		}
	}
	for _, bad := range []struct{ first, count int }{{4, 3}, {19, 2}, {5, 1}, {0, 21}} {
		es2 := append([]store.LogEntry(nil), es...)
		for i := range es2 {
			es2[i].Unit = 0
		}
		es2[2].Unit = 3
		raw := encodeBatch(nil, 10, 20, 30, es2)
		// Rewrite the second unit's place by hand: encodeBatch only
		// writes lists that fit.
		raw = append(raw[:len(raw)-12], 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3)
		raw = binary.BigEndian.AppendUint32(raw, uint32(bad.first))
		raw = binary.BigEndian.AppendUint32(raw, uint32(bad.count))
		if _, err := decodeBatch(raw); err == nil {
			t.Fatalf("a unit of %d entries at entry %d of %d decoded", bad.count, bad.first, len(es2))
		}
	}
}

func TestRecords(t *testing.T) {
	r1 := makeRecord(1, []byte("hello"))
	r2 := makeRecord(2, []byte("world!"))
	b := append(append([]byte{}, r1...), r2...)
	if n, err := countRecords(b); n != 2 || err != nil {
		t.Fatalf("count %d %v", n, err)
	}
	if _, err := countRecords(b[:len(b)-1]); err == nil {
		t.Fatal("partial record counted")
	}
	if !recordBoundary(b, 0) || !recordBoundary(b, len(r1)) || !recordBoundary(b, len(b)) || recordBoundary(b, 5) {
		t.Fatal("record boundaries")
	}
	// The record layout is MetaQ's (the Records example in broker/wire/doc.go): id 0x0102030405060708, body "hello".
	want := "00000005" + "3610a686" + "0102030405060708" + "00000000" + "68656c6c6f"
	if got := bytesHex(makeRecord(0x0102030405060708, []byte("hello"))); got != want {
		t.Fatalf("record %s, want %s", got, want)
	}
}

func bytesHex(b []byte) string {
	const hx = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, hx[c>>4], hx[c&15])
	}
	return string(out)
}

func TestResolver(t *testing.T) {
	for in, want := range map[string]string{
		"meta://10.1.2.3:8123": "10.1.2.3:8124",
		"meta://[::1]:8123":    "[::1]:8124",
		" meta://h:1 ":         "h:2",
	} {
		if got, err := AddrFromMasterURL(in, 1); err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "http://h:1", "meta://h", "meta://h:x", "meta://h:65535"} {
		if _, err := AddrFromMasterURL(bad, 1); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := StaticResolver("").MasterAddr(t.Context()); err == nil {
		t.Error("empty static resolver")
	}
}

func TestAutoChooser(t *testing.T) {
	var c codecChooser
	c.init(ModeAuto, 0)
	if got := c.pick(0); got != CodecZstd {
		t.Fatalf("no RTT yet: %v", got)
	}
	if got := c.pick(500 * time.Microsecond); got != CodecS2 {
		t.Fatalf("LAN: %v", got)
	}
	if got := c.pick(61 * time.Millisecond); got != CodecZstd {
		t.Fatalf("WAN: %v", got)
	}
	c.init(ModeAuto, 6_250_000) // 50 Mbit/s cap on a LAN RTT: the link is the bottleneck
	if got := c.pick(500 * time.Microsecond); got != CodecZstd {
		t.Fatalf("capped LAN: %v", got)
	}
	c.init(ModeAuto, 400<<20)
	if got := c.pick(61 * time.Millisecond); got != CodecS2 {
		t.Fatalf("fast cap: %v", got)
	}
	// Incompressible frames switch to none, then probe again.
	c = codecChooser{}
	c.init(ModeAuto, 0)
	for i := 0; i < autoWindow; i++ {
		c.observe(c.pick(61*time.Millisecond), 1000, 1000)
	}
	if got := c.pick(61 * time.Millisecond); got != CodecNone {
		t.Fatalf("incompressible: %v", got)
	}
	for i := 0; i < autoBackoff; i++ {
		c.pick(61 * time.Millisecond)
	}
	if got := c.pick(61 * time.Millisecond); got != CodecZstd {
		t.Fatalf("after backoff: %v", got)
	}
	for _, m := range []struct {
		mode Mode
		want Codec
	}{{ModeZstd, CodecZstd}, {ModeS2, CodecS2}, {ModeNone, CodecNone}} {
		c.init(m.mode, 0)
		if got := c.pick(time.Microsecond); got != m.want {
			t.Fatalf("%s: %v", m.mode, got)
		}
	}
}
