package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// startOnStore starts a broker over an open store (the caller closes it).
func startOnStore(t testing.TB, cfg []byte, st *store.Store, mod func(*Options)) *Broker {
	t.Helper()
	opts := Options{Config: parseConfig(t, cfg), Store: st, ListenAddr: "127.0.0.1:0", Logger: testutil.Logger(t, slog.LevelInfo)}
	if mod != nil {
		mod(&opts)
	}
	b, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// dialTLS is dial over TLS, trusting the certificate in dir.
func dialTLS(t testing.TB, addr net.Addr, dir string) *client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(dir, "srv.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	nc, err := tls.Dial("tcp", addr.String(), &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := &client{t: t, nc: nc}
	c.r = bufio.NewReader(nc)
	c.d = wire.NewDecoder(c.r)
	return c
}

// TestGetZeroCopyMatchesCopyPath: the same gets answered by four brokers
// over one store: one sending from the log files (sendfile), answering
// gets at the tail on the connection's reader (getInline), one doing the
// same on worker goroutines only, one with CopyGets, and one behind a TLS
// listener (which falls back to the copy path). Every answer frame is
// byte for byte the same, for records of every size class, cut at any
// maxSize (partial records), from offsets inside records, at and past the
// end, and across a log segment boundary.
func TestGetZeroCopyMatchesCopyPath(t *testing.T) {
	cfg := largeGetConfig(t)
	st, err := store.Open(store.Options{Dir: t.TempDir(), SegmentBytes: 256 << 10, ScrubRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	zc := startOnStore(t, cfg, st, nil)
	cp := startOnStore(t, cfg, st, func(o *Options) { o.CopyGets = true })
	dir := t.TempDir()
	testutil.WriteCert(t, dir, "srv", false, nil, nil)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "srv.pem"), filepath.Join(dir, "srv.key"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := startOnStore(t, cfg, st, func(o *Options) {
		o.Listener = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
	})

	// Pipelined puts of each size class, so the store gets batches.
	rnd := rand.New(rand.NewSource(26))
	pc := dial(t, zc.Addr())
	var starts []int64
	opaque := int32(0)
	for round := 0; round < 2; round++ {
		for _, size := range []int{1, 100, 1000, 4096, 30000, 120000} {
			k := 1 + (64<<10)/(size+20)
			var buf []byte
			for i := 0; i < k; i++ {
				b := make([]byte, size)
				rnd.Read(b)
				opaque++
				buf = putCmd("test", 0, string(b), opaque).AppendTo(buf)
			}
			pc.send(buf)
			for i := 0; i < k; i++ {
				r := pc.result()
				if !r.OK() {
					t.Fatalf("put: %s", r)
				}
				var id, off int64
				var p int
				fmt.Sscanf(string(r.Body), "%d %d %d", &id, &p, &off)
				starts = append(starts, off)
			}
		}
	}
	wk := startOnStore(t, cfg, st, func(o *Options) { o.noInlineGets = true })
	clients := []*client{dial(t, zc.Addr()), dial(t, cp.Addr()), dialTLS(t, tl.Addr(), dir), dial(t, wk.Addr())}
	before := zc.stats.getsSent.Load()
	gets := 0
	get := func(off int64, max int32) {
		t.Helper()
		gets++
		var frames [4][]byte
		for i, cl := range clients {
			cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: off, MaxSize: max, Opaque: int32(gets)})
			f, err := cl.readRaw(10 * time.Second)
			if err != nil {
				t.Fatalf("get(%d, %d) from broker %d: %v", off, max, i, err)
			}
			frames[i] = f
		}
		if !bytes.Equal(frames[0], frames[1]) || !bytes.Equal(frames[0], frames[2]) || !bytes.Equal(frames[0], frames[3]) {
			t.Fatalf("get(%d, %d): answers differ: sendfile %d bytes, copy %d, TLS %d, sendfile on workers %d", off, max, len(frames[0]), len(frames[1]), len(frames[2]), len(frames[3]))
		}
	}
	end := starts[len(starts)-1] + 20 + 120000
	for _, off := range []int64{end, end + 1, end - 20 - 120000 - 20 - 30000} {
		for _, max := range []int32{1, 20, 64 << 10, 1<<20 + 5} {
			get(off, max)
		}
	}
	get(0, 0) // a bad maxSize
	for i, off := range starts {
		if i%151 != 0 && (i+1 == len(starts) || starts[i+1]-off < 4096) {
			continue // every large record, a sample of the small ones
		}
		for _, max := range []int32{1, 19, 20, 1000, 4116, 64 << 10, 1<<20 + 5} {
			get(off, max)
		}
		get(off+3, 1<<20)
	}
	sent := zc.stats.getsSent.Load() - before

	// The same gets pipelined, many in one write: answers ready together
	// are written together (several runs and results in one stream through
	// a pipe), and each is still byte for byte the copy path's, by opaque
	// (answers on workers may come out of order).
	var many []*wire.Get
	for i, off := range starts {
		if i%151 != 0 && (i+1 == len(starts) || starts[i+1]-off < 4096) {
			continue
		}
		for _, max := range []int32{19, 4116, 1 << 20} {
			many = append(many, &wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: off, MaxSize: max})
		}
		many = append(many, &wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: end, MaxSize: 1 << 20})
	}
	batchedBefore := zc.stats.getsBatched.Load()
	sentBefore := zc.stats.getsSent.Load()
	var answers [3]map[string][]byte
	for i, cl := range []*client{clients[0], clients[1], clients[3]} {
		var buf []byte
		for k, g := range many {
			g.Opaque = int32(100000 + k)
			buf = g.AppendTo(buf)
		}
		cl.send(buf)
		answers[i] = make(map[string][]byte, len(many))
		for range many {
			f, err := cl.readRaw(10 * time.Second)
			if err != nil {
				t.Fatalf("pipelined gets from broker %d: %v", i, err)
			}
			h := strings.Fields(string(f[:bytes.IndexByte(f, '\n')]))
			answers[i][h[len(h)-1]] = f
		}
	}
	for op, f := range answers[1] {
		if !bytes.Equal(answers[0][op], f) || !bytes.Equal(answers[2][op], f) {
			t.Fatalf("pipelined get with opaque %s: answers differ: sendfile %d bytes, copy %d, sendfile on workers %d", op, len(answers[0][op]), len(f), len(answers[2][op]))
		}
	}
	if len(answers[0]) != len(many) || len(answers[1]) != len(many) || len(answers[2]) != len(many) {
		t.Fatalf("pipelined gets: %d, %d and %d distinct answers to %d gets", len(answers[0]), len(answers[1]), len(answers[2]), len(many))
	}
	if zc.stats.getsSent.Load() == sentBefore || zc.stats.getsBatched.Load() == batchedBefore {
		t.Fatalf("pipelined gets: %d sent from the files, %d of them in a batch: batches were not exercised",
			zc.stats.getsSent.Load()-sentBefore, zc.stats.getsBatched.Load()-batchedBefore)
	}

	if sent == 0 || sent == int64(gets) {
		t.Fatalf("%d of %d gets sent from the files: both paths must be exercised", sent, gets)
	}
	if n := cp.stats.getsSent.Load() + tl.stats.getsSent.Load(); n != 0 {
		t.Fatalf("%d gets sent from the files by the copy-path brokers", n)
	}
	if n := wk.stats.getsSent.Load(); n != zc.stats.getsSent.Load()-before {
		t.Fatalf("%d gets sent from the files on workers, %d with gets on the reader", n, sent)
	}
	inline := zc.stats.getsInline.Load()
	if inline == 0 || inline == int64(gets) {
		t.Fatalf("%d of %d gets answered on the reader: both the reader and the workers must be exercised", inline, gets)
	}
	if n := cp.stats.getsInline.Load() + tl.stats.getsInline.Load() + wk.stats.getsInline.Load(); n != 0 {
		t.Fatalf("%d gets answered on the reader by brokers that must not", n)
	}
	for _, b := range []*Broker{zc, wk} {
		if r := b.Resources(); r.BufferedBytes != 0 {
			t.Fatalf("%d bytes still held after the answers", r.BufferedBytes)
		}
	}
}
