package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return b.(*net.TCPConn), a.(*net.TCPConn)
}

// sendOverTCP sends run (its Head, then its sections) through a real
// socket (spliced through a pipe, or with sendfile when withSendfile is
// set) and returns what arrived.
func sendOverTCP(t testing.TB, run *LogRun, srv, cli *net.TCPConn, withSendfile bool) []byte {
	t.Helper()
	splicePipes.off.Store(withSendfile)
	defer splicePipes.off.Store(false)
	pipes := splicePipes.inUse()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, len(run.Head)+run.Len())
		cli.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.ReadFull(cli, b)
		got <- b[:n]
	}()
	srv.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if sent, ok, err := sendSections(srv, run.Head, run.secs, nil); !ok || err != nil || sent != int64(len(run.Head)+run.Len()) {
		t.Fatalf("sendfile: sent %d of %d, used %v: %v", sent, len(run.Head)+run.Len(), ok, err)
	}
	if n := splicePipes.inUse(); n != pipes && (n != 1 || pipes != 0 || withSendfile) {
		t.Fatalf("pipes in existence went from %d to %d across one send", pipes, n)
	}
	return <-got
}

// TestReadRunMatchesRead: an answer sent from the log files (spliced or
// sent with sendfile to a socket, or copied from the sections) is byte for byte what Read returns,
// for records of every size class, cut anywhere (partial records at
// maxBytes), across segment boundaries; and ReadRun declines (nil) rather
// than serve a run of small chunks.
func TestReadRunMatchesRead(t *testing.T) {
	s := openT(t, Options{SegmentBytes: 96 << 10, ScrubRate: -1})
	rnd := rand.New(rand.NewSource(26))
	body := func(n int) []byte {
		b := make([]byte, n)
		rnd.Read(b)
		return b
	}
	var want []byte
	var starts []int64
	sizes := []int{0, 1, 19, 100, 1000, 4096, 20000, 70000, 150000}
	for round := 0; round < 3; round++ {
		for _, size := range sizes {
			k := 1 + (8<<10)/(size+20) // batches of at least 8 KiB of records
			msgs := make([]Message, k)
			for i := range msgs {
				msgs[i] = Message{Body: body(size)}
			}
			a, err := s.Append(context.Background(), "z", 0, msgs)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range msgs {
				starts = append(starts, int64(len(want)))
				want = AppendRecord(want, a[i].ID, 0, m.Body)
			}
			mustAppend(t, s, "z", 1, string(body(300))) // another partition between
		}
		// single small records: too small for sendfile
		for i := 0; i < 20; i++ {
			b := body(10)
			a := mustAppend(t, s, "z", 0, string(b))
			starts = append(starts, int64(len(want)))
			want = AppendRecord(want, a[0].ID, 0, b)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, s, "z", 0); !bytes.Equal(got, want) {
		t.Fatalf("partition bytes differ from what was written (%d, want %d)", len(got), len(want))
	}
	srv, cli := tcpPair(t)
	runs, declined, crossed := 0, 0, 0
	check := func(off int64, max int) {
		t.Helper()
		exp, err := s.Read("z", 0, off, max)
		run, rerr := s.ReadRun("z", 0, off, max)
		if err != nil || rerr != nil {
			t.Fatalf("Read(%d, %d): %v; ReadRun: %v", off, max, err, rerr)
		}
		if run == nil {
			declined++
			return
		}
		defer run.Release()
		runs++
		if len(run.pins) > 1 {
			crossed++
		}
		if runs%2 == 0 {
			// An answer's header goes first, in the same packet.
			run.Head = fmt.Appendf(nil, "value %d %d\r\n", len(exp), runs)
			exp = append(slices.Clip(run.Head), exp...)
		}
		var buf bytes.Buffer
		if _, err := run.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), exp) {
			t.Fatalf("ReadRun(%d, %d) copied: %d bytes differ from Read's %d", off, max, buf.Len(), len(exp))
		}
		// Spliced through a pipe, or (every third run) by sendfile.
		how := "spliced"
		if runs%3 == 0 {
			how = "by sendfile"
		}
		if got := sendOverTCP(t, run, srv, cli, runs%3 == 0); !bytes.Equal(got, exp) {
			t.Fatalf("ReadRun(%d, %d) %s: %d bytes differ from Read's %d", off, max, how, len(got), len(exp))
		}
	}
	for i, st := range starts {
		if i%29 != 0 && (i == 0 || starts[i]-starts[i-1] < 1000) {
			continue // every large record, a sample of the small ones
		}
		rl := int(firstLen(want[st:]))
		for _, max := range []int{rl - 1, rl, rl + 1, rl + 25, 64 << 10, 1 << 20} {
			if max > 0 {
				check(st, max)
			}
		}
		if rl > 2 {
			check(st+1, 1<<20) // a get that starts inside a record
		}
	}
	for k := 0; k < 100; k++ {
		check(rnd.Int63n(int64(len(want))), 1+rnd.Intn(2<<20))
	}
	if runs == 0 || declined == 0 || crossed == 0 {
		t.Fatalf("runs %d, declined %d, across segments %d: every kind of answer must be exercised", runs, declined, crossed)
	}
}

// firstLen is the length of the record b starts with.
func firstLen(b []byte) int64 { return 20 + int64(binary.BigEndian.Uint32(b)) }

// TestReadRunOnlyServesCheckedBytes: after a clean restart the old bytes
// (below the checkpoint, not scanned) are copied (and checked) until the
// scrub has checked their segment; new bytes are sent at once.
func TestReadRunOnlyServesCheckedBytes(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, Options{Dir: dir, SegmentBytes: 64 << 10, ScrubRate: -1})
	big := strings.Repeat("x", 4000)
	for i := 0; i < 40; i++ {
		mustAppend(t, s, "z", 0, big, big, big)
	}
	s.Close()
	s = openT(t, Options{Dir: dir, SegmentBytes: 64 << 10, ScrubRate: -1})
	if run, err := s.ReadRun("z", 0, 0, 1<<20); err != nil || run != nil {
		t.Fatalf("unchecked old bytes: run %v, err %v; want the copy path", run, err)
	}
	if u := s.Scrub().Unchecked; u == 0 {
		t.Fatal("scrub status shows nothing unchecked after a clean restart")
	}
	a := mustAppend(t, s, "z", 0, big, big, big)
	run, err := s.ReadRun("z", 0, a[0].Offset, 1<<20)
	if err != nil || run == nil {
		t.Fatalf("bytes written by this process: run %v, err %v", run, err)
	}
	run.Release()
	s.Close()

	s = openT(t, Options{Dir: dir, SegmentBytes: 64 << 10, ScrubRate: 1 << 30, ScrubDelay: time.Millisecond})
	waitFor(t, func() bool { return s.Scrub().Passes > 0 })
	st := s.Scrub()
	if st.Unchecked != 0 || st.Bytes == 0 || st.Damaged != 0 {
		t.Fatalf("after a pass: %+v", st)
	}
	exp, err := s.Read("z", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	run, err = s.ReadRun("z", 0, 0, 1<<20)
	if err != nil || run == nil {
		t.Fatalf("scrubbed bytes: run %v, err %v", run, err)
	}
	defer run.Release()
	var buf bytes.Buffer
	run.WriteTo(&buf)
	if !bytes.Equal(buf.Bytes(), exp) {
		t.Fatal("run of scrubbed bytes differs from Read")
	}
}

// TestScrubFindsAndRepairsFlippedBytes flips bytes of a record in a sealed
// segment of a running store: the scrub finds them, the damaged record
// becomes a hole (listed by Damaged, never served by either path), the
// other records of its entry stay, and Repair (the path that fills holes
// from a replica) makes the partition whole again.
func TestScrubFindsAndRepairsFlippedBytes(t *testing.T) {
	opts := Options{Dir: t.TempDir(), SegmentBytes: 64 << 10, ScrubRate: 1 << 30, ScrubDelay: time.Hour}
	p := writeFlippedPartition(t, opts)
	// the scrub starts (a fresh store with a short delay)
	opts.ScrubDelay = time.Millisecond
	s := openT(t, opts)
	p.scrubFindsAndRepairs(t, s)
	if got := readAll(t, s, "z", 0); !bytes.Equal(got, p.all) {
		t.Fatal("partition differs from what was written after the repair")
	}
}

// flippedPartition is partition z-0 of a closed store: 60 entries of two
// records, with one byte flipped in the second record of the middle entry
// of the first (sealed) segment.
type flippedPartition struct {
	want  map[int64][]byte // record bytes by offset
	all   []byte           // the partition as written
	off   int64            // the damaged entry's first record, intact
	first []byte           // that record
}

func writeFlippedPartition(t *testing.T, opts Options) flippedPartition {
	t.Helper()
	dir := opts.Dir
	s := openT(t, opts)
	want := map[int64][]byte{}
	var all []byte
	for i := 0; i < 60; i++ {
		bodies := []string{fmt.Sprintf("%04d-%s", i, strings.Repeat("a", 1500)), fmt.Sprintf("%04d-%s", i, strings.Repeat("b", 1500))}
		for j, a := range mustAppend(t, s, "z", 0, bodies...) {
			want[a.Offset] = AppendRecord(nil, a.ID, 0, []byte(bodies[j]))
			all = append(all, want[a.Offset]...)
		}
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	// flip a byte of the second record of the first entry in the first
	// (sealed) segment's middle
	seg := logFiles(t, dir, segSuffix)[0]
	poss := entryPositions(t, seg, 0)
	pos := poss[len(poss)/2]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, entryHeaderLen)
	f.ReadAt(hdr, pos)
	off := int64(binary.BigEndian.Uint64(hdr[20:]))
	first := want[off]
	at := pos + entryHeaderLen + int64(len(first)) + 30 // in the second record's body
	b := []byte{0}
	f.ReadAt(b, at)
	b[0] ^= 0x40
	f.WriteAt(b, at)
	f.Close()

	s.Close()
	return flippedPartition{want: want, all: all, off: off, first: first}
}

// scrubFindsAndRepairs waits for s's first scrub pass, checks that it found
// exactly the flipped record, that neither read path serves it while the
// rest of its entry is served, and repairs it.
func (p flippedPartition) scrubFindsAndRepairs(t *testing.T, s *Store) {
	t.Helper()
	want, off, first := p.want, p.off, p.first
	waitFor(t, func() bool { return s.Scrub().Passes > 0 })
	if st := s.Scrub(); st.Damaged != 1 {
		t.Fatalf("scrub status %+v: want one damaged range", st)
	}
	d := s.Damaged()
	lostOff := off + int64(len(first))
	if len(d) != 1 || d[0].From != lostOff || d[0].To != lostOff+int64(len(want[lostOff])) {
		t.Fatalf("damage %v, want the second record [%d, %d)", d, lostOff, lostOff+int64(len(want[lostOff])))
	}
	for _, read := range []func() error{
		func() error { _, err := s.Read("z", 0, lostOff, 1<<20); return err },
		func() error { _, err := s.ReadRun("z", 0, lostOff, 1<<20); return err },
	} {
		var de *DamagedError
		if err := read(); !errors.As(err, &de) {
			t.Fatalf("read of the damaged record: %v, want a DamagedError", err)
		}
	}
	if got, err := s.Read("z", 0, off, len(first)); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("the intact first record of the entry: %v", err)
	}
	if err := s.Repair(t.Context(), "z", 0, lostOff, want[lostOff]); err != nil {
		t.Fatal(err)
	}
	if d := s.Damaged(); len(d) != 0 {
		t.Fatalf("damage after repair: %v", d)
	}
}

const zeroCopyChildEnv = "METAQ_STORE_ZEROCOPY_CHILD"

// zeroCopyChild opens the store at dir, fills a partition, and sends one
// run of it to the first connection on a loopback listener (address on
// stdout), then waits to be killed.
func zeroCopyChild(dir string) {
	s, err := Open(Options{Dir: dir, SegmentBytes: 4 << 20, ScrubRate: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 256)
	for i := 0; i < 2048; i++ {
		msgs := make([]Message, 4)
		for j := range msgs {
			msgs[j] = Message{Body: append([]byte(strconv.Itoa(i*4+j)), body...)}
		}
		if _, err := s.Append(context.Background(), "z", 0, msgs); err != nil {
			fmt.Fprintln(os.Stderr, "child append:", err)
			os.Exit(3)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.Exit(3)
	}
	fmt.Println(ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		os.Exit(3)
	}
	c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	run, err := s.ReadRun("z", 0, 0, 8<<20)
	if err != nil || run == nil {
		fmt.Fprintln(os.Stderr, "child ReadRun:", run, err)
		os.Exit(3)
	}
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(run.Len()))
	c.Write(hdr[:])
	fmt.Println("sending")
	run.WriteTo(c)
	select {}
}

// TestKillDuringZeroCopyAnswer kills the process (SIGKILL) while it sends
// an answer with sendfile to a client that reads slowly: the client gets a
// correct prefix and then the end of the connection (a clean error, never
// other bytes), and the store recovers with every record.
func TestKillDuringZeroCopyAnswer(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), zeroCopyChildEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(out)
	addr, err := lines.ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	nc, err := d.Dial("tcp", strings.TrimSpace(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	var hdr [8]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		t.Fatal(err)
	}
	n := int(binary.BigEndian.Uint64(hdr[:]))
	if l, err := lines.ReadString('\n'); err != nil || l != "sending\n" {
		t.Fatalf("child: %q %v", l, err)
	}
	got := make([]byte, 256<<10)
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	rest, err := io.ReadAll(nc)
	got = append(got, rest...)
	if err == nil && len(got) >= n {
		t.Fatalf("the whole answer (%d bytes) arrived: the kill did not interrupt it", n)
	}
	s := openT(t, Options{Dir: dir, SegmentBytes: 4 << 20, ScrubRate: -1})
	all := readAll(t, s, "z", 0)
	if recs := decodeAll(t, all); len(recs) != 2048*4 {
		t.Fatalf("recovered %d records, want %d", len(recs), 2048*4)
	}
	if len(got) > n || !bytes.Equal(got, all[:len(got)]) {
		t.Fatalf("the client got %d bytes that are not a prefix of the partition", len(got))
	}
	t.Logf("client got %d of %d bytes, then %v", len(got), n, err)
}

// TestReadRunStopsAtDurableEnd: with acknowledgements before fsync
// (UnflushThreshold > 0) a run ends at the log's durable end, so a failed
// fdatasync's rollback never cuts a file under a sendfile.
func TestReadRunStopsAtDurableEnd(t *testing.T) {
	s := openT(t, Options{ScrubRate: -1, DefaultPolicy: Policy{UnflushThreshold: 1 << 20, UnflushInterval: time.Hour}})
	big := strings.Repeat("d", 8000)
	mustAppend(t, s, "z", 0, big, big)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	durable := mustAppend(t, s, "z", 0, big)[0].Offset // not fsynced
	all, err := s.Read("z", 0, 0, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(all)) <= durable {
		t.Fatalf("Read returned %d bytes, want the unflushed record too", len(all))
	}
	run, err := s.ReadRun("z", 0, 0, 1<<20)
	if err != nil || run == nil {
		t.Fatalf("ReadRun: %v %v", run, err)
	}
	var buf bytes.Buffer
	run.WriteTo(&buf)
	run.Release()
	if int64(buf.Len()) != durable || !bytes.Equal(buf.Bytes(), all[:durable]) {
		t.Fatalf("run of %d bytes, want the %d durable ones", buf.Len(), durable)
	}
	var re *RangeError
	if run, err := s.ReadRun("z", 0, durable, 1<<20); run != nil || !errors.As(err, &re) {
		t.Fatalf("run starting at the durable end: %v %v, want a RangeError as Read gives", run, err)
	}
}

// TestScrubIsRateLimited: a pass reads no faster than ScrubRate (after its
// first burst of scrubBurst), and reports its progress as it goes.
func TestScrubIsRateLimited(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, SegmentBytes: 512 << 10, ScrubRate: -1}
	s := openT(t, opts)
	big := strings.Repeat("r", 60000)
	for i := 0; i < 50; i++ { // 3 MB in sealed segments
		mustAppend(t, s, "z", 0, big)
	}
	s.Close()
	opts.ScrubRate, opts.ScrubDelay = 1<<20, time.Millisecond
	start := time.Now()
	s = openT(t, opts)
	waitFor(t, func() bool { return s.Scrub().Bytes > 0 })
	if st := s.Scrub(); st.Passes != 0 || st.Position == 0 {
		t.Fatalf("early in the pass: %+v", st)
	}
	for s.Scrub().Passes == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	st := s.Scrub()
	took := time.Since(start)
	if min := time.Duration(float64(st.Bytes-scrubBurst) / float64(opts.ScrubRate) * float64(time.Second)); took < min*9/10 {
		t.Fatalf("a pass of %d bytes took %v at %d bytes/s, want at least %v", st.Bytes, took, opts.ScrubRate, min)
	}
	if st.Bytes < 3000000 || st.Unchecked != 0 {
		t.Fatalf("after the pass: %+v", st)
	}
}
