package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSpliceThroughSmallPipe: a run many times the pipe's size reaches the
// socket whole and in order (the pipe emptied into the socket each time it
// fills); a section the file cannot fill sends the correct prefix, then
// fails with io.ErrUnexpectedEOF, and its pipe is closed, not lent again.
func TestSpliceThroughSmallPipe(t *testing.T) {
	s := openT(t, Options{ScrubRate: -1, sendfileMinChunk: 1})
	var want []byte
	for i := range 40 {
		msgs := make([]Message, 8)
		for k := range msgs {
			b := bytes.Repeat([]byte{byte(i), byte(k)}, 1000+i*37)
			msgs[k] = Message{Body: b}
		}
		a, err := s.Append(context.Background(), "z", 0, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range msgs {
			want = AppendRecord(want, a[k].ID, 0, m.Body)
		}
		mustAppend(t, s, "z", 1, "between") // the chunks are sections of their own
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	run, err := s.ReadRun("z", 0, 0, len(want))
	if err != nil || run == nil {
		t.Fatalf("ReadRun: %v, %v", run, err)
	}
	defer run.Release()
	if run.Len() != len(want) || len(run.secs) < 20 {
		t.Fatalf("run of %d bytes in %d sections, want %d bytes in 40", run.Len(), len(run.secs), len(want))
	}
	head := []byte("value 1 2\r\n")
	exp := append(append([]byte(nil), head...), want...)

	pool := newPipePool(1)
	send := func(secs []section) ([]byte, int64, error) {
		return sendThroughSmallPipe(t, pool, func(rc syscall.RawConn, p *splicePipe) (int64, error) {
			return spliceSections(rc, p, head, secs, nil)
		})
	}
	got, sent, err := send(run.secs)
	if err != nil || sent != int64(len(exp)) || !bytes.Equal(got, exp) {
		t.Fatalf("spliced through a %d-byte pipe: sent %d, %d bytes arrived (want %d, equal %v): %v", 4096, sent, len(got), len(exp), bytes.Equal(got, exp), err)
	}
	if pool.n.Load() != 1 {
		t.Fatalf("%d pipes after a good send, want the one lent back", pool.n.Load())
	}

	// A section past its file's end.
	f, err := os.Create(filepath.Join(t.TempDir(), "short"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	secs := []section{{f: f, off: 0, n: 5000}, {f: f, off: 6000, n: 8000}}
	got, _, err = send(secs)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a section past the file's end: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	prefix := append(append(append([]byte(nil), head...), data[:5000]...), data[6000:]...)
	if !bytes.Equal(got, prefix) {
		t.Fatalf("got %d bytes, want the %d bytes the file holds, in order", len(got), len(prefix))
	}
	if pool.n.Load() != 0 {
		t.Fatalf("%d pipes after a failed send, want 0 (closed)", pool.n.Load())
	}
}

// TestSendBatchThroughSmallPipe: a batch of bytes and runs (bytes longer
// than the pipe, runs many times its size) reaches the socket whole and in
// order through one small pipe; a section the file cannot fill sends the
// correct prefix of the batch, then fails with io.ErrUnexpectedEOF.
func TestSendBatchThroughSmallPipe(t *testing.T) {
	s := openT(t, Options{ScrubRate: -1, sendfileMinChunk: 1})
	var want []byte
	for i := range 20 {
		msgs := make([]Message, 4)
		for k := range msgs {
			msgs[k] = Message{Body: bytes.Repeat([]byte{byte(i), byte(k)}, 900+i*41)}
		}
		a, err := s.Append(context.Background(), "z", 0, msgs)
		if err != nil {
			t.Fatal(err)
		}
		for k, m := range msgs {
			want = AppendRecord(want, a[k].ID, 0, m.Body)
		}
		mustAppend(t, s, "z", 1, "between")
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	half := len(want) / 2
	r1, err := s.ReadRun("z", 0, 0, half)
	if err != nil || r1 == nil {
		t.Fatalf("ReadRun: %v, %v", r1, err)
	}
	defer r1.Release()
	r2, err := s.ReadRun("z", 0, int64(r1.Len()), len(want))
	if err != nil || r2 == nil {
		t.Fatalf("ReadRun: %v, %v", r2, err)
	}
	defer r2.Release()
	if r1.Len()+r2.Len() != len(want) {
		t.Fatalf("runs of %d and %d bytes, want %d in all", r1.Len(), r2.Len(), len(want))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16,000 bytes: more than the pipe holds
	pieces := []Piece{{Bytes: []byte("value 1 1\r\n"), Run: r1}, {Bytes: big}, {Bytes: []byte("h2"), Run: r2}, {Bytes: []byte("tail")}}
	exp := slices.Concat([]byte("value 1 1\r\n"), want[:r1.Len()], big, []byte("h2"), want[r1.Len():], []byte("tail"))

	pool := newPipePool(1)
	send := func(pieces []Piece) ([]byte, int64, error) {
		return sendThroughSmallPipe(t, pool, func(rc syscall.RawConn, p *splicePipe) (int64, error) {
			ps := pipeSend{rc: rc, p: p}
			err := ps.pieces(pieces)
			return ps.sent, err
		})
	}
	got, sent, err := send(pieces)
	if err != nil || sent != int64(len(exp)) || !bytes.Equal(got, exp) {
		t.Fatalf("batch through a 4096-byte pipe: sent %d, %d bytes arrived (want %d, equal %v): %v", sent, len(got), len(exp), bytes.Equal(got, exp), err)
	}

	// A run with a section past its file's end, between two pieces of bytes.
	f, err := os.Create(filepath.Join(t.TempDir(), "short"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	bad := &LogRun{secs: []section{{f: f, off: 0, n: 5000}, {f: f, off: 6000, n: 8000}}, n: 13000}
	got, _, err = send([]Piece{{Bytes: []byte("head")}, {Bytes: []byte("h"), Run: bad}, {Bytes: []byte("never")}})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a section past the file's end: %v, want %v", err, io.ErrUnexpectedEOF)
	}
	if prefix := slices.Concat([]byte("headh"), data[:5000], data[6000:]); !bytes.Equal(got, prefix) {
		t.Fatalf("got %d bytes, want the %d bytes before the missing ones, in order", len(got), len(prefix))
	}
}

// sendThroughSmallPipe takes a pipe from pool, shrinks it to 4096 bytes,
// and calls send with it and the sending end of a loopback TCP pair; it
// returns what arrived at the other end, with send's count and error. The
// pipe goes back to pool after a send that failed nowhere and left nothing
// in it, and is closed otherwise (as the store's senders do).
func sendThroughSmallPipe(t *testing.T, pool *pipePool, send func(rc syscall.RawConn, p *splicePipe) (int64, error)) ([]byte, int64, error) {
	t.Helper()
	p := pool.get()
	if p == nil {
		t.Fatal("no pipe")
	}
	size, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, 4096)
	if err != nil {
		t.Fatalf("F_SETPIPE_SZ: %v", err)
	}
	p.size = size
	srv, cli := tcpPair(t)
	got := make(chan []byte, 1)
	go func() {
		cli.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _ := io.ReadAll(cli)
		got <- b
	}()
	rc, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	srv.SetWriteDeadline(time.Now().Add(10 * time.Second))
	sent, serr := send(rc, p)
	if serr != nil || p.held > 0 {
		p.close()
	} else {
		pool.put(p)
	}
	srv.Close()
	return <-got, sent, serr
}

// TestPipeBound: pipes take at most one descriptor pair per 128 of the
// open-file limit, and none under a limit of less than 128.
func TestPipeBound(t *testing.T) {
	for _, c := range []struct {
		limit uint64
		want  int
	}{{0, maxSplicePipes}, {64, 0}, {256, 2}, {1024, 8}, {1 << 20, maxSplicePipes}} {
		if got := pipeBound(c.limit); got != c.want {
			t.Errorf("pipeBound(%d) = %d, want %d", c.limit, got, c.want)
		}
	}
	if p := newPipePool(0).get(); p != nil {
		t.Fatal("a pool of 0 pipes lent one")
	}
}

// TestReadRunSplicesSmallChunks: a run of 1-4 KiB chunks (a partition's
// share of each commit at a steady put rate) is sent from the files when
// it will be spliced (three sections or more and a pipe free), byte for
// byte what Read returns; it is copied when it would go by sendfile
// instead (no pipe, or fewer sections), and chunks below 1 KiB are always
// copied.
func TestReadRunSplicesSmallChunks(t *testing.T) {
	s := openT(t, Options{ScrubRate: -1})
	var want []byte
	for i := range 12 {
		b := bytes.Repeat([]byte{byte(i)}, 1500) // 1,520-byte chunks
		a := mustAppend(t, s, "z", 0, string(b))
		want = AppendRecord(want, a[0].ID, 0, b)
		mustAppend(t, s, "z", 1, "between") // the chunks are sections of their own
		mustAppend(t, s, "z", 2, strings.Repeat("s", 500))
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	run, err := s.ReadRun("z", 0, 0, len(want))
	if err != nil || run == nil {
		t.Fatalf("12 chunks of 1.5 KiB with pipes free: run %v, err %v; want a run", run, err)
	}
	if len(run.secs) != 12 {
		t.Fatalf("run in %d sections, want 12", len(run.secs))
	}
	srv, cli := tcpPair(t)
	got := sendOverTCP(t, run, srv, cli, false)
	run.Release()
	exp, err := s.Read("z", 0, 0, len(want))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, exp) || !bytes.Equal(exp, want) {
		t.Fatalf("spliced %d bytes, Read %d, written %d: they differ", len(got), len(exp), len(want))
	}

	// Two sections: each would be its own sendfile, dearer than a copy.
	if run, err := s.ReadRun("z", 0, 0, 2*1520); err != nil || run != nil {
		t.Fatalf("2 chunks of 1.5 KiB: run %v, err %v; want the copy path", run, err)
	}
	// No pipe to lend: sendfile again.
	splicePipes.off.Store(true)
	run, err = s.ReadRun("z", 0, 0, len(want))
	splicePipes.off.Store(false)
	if err != nil || run != nil {
		t.Fatalf("12 chunks of 1.5 KiB, no pipe: run %v, err %v; want the copy path", run, err)
	}
	// Chunks below 1 KiB: copied whatever the pipes.
	if run, err := s.ReadRun("z", 2, 0, 1<<20); err != nil || run != nil {
		t.Fatalf("12 chunks of 520 bytes: run %v, err %v; want the copy path", run, err)
	}
}
