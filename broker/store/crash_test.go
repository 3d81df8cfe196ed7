package store

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/internal/testutil"
)

const crashChildEnv = "METAQ_STORE_CRASH_CHILD"

// crashBody is the deterministic body of one message, so the parent can
// check content from an ack line alone.
func crashBody(cycle, writer, seq int) []byte {
	n := (cycle*131 + writer*31 + seq*7) % 700
	b := []byte(fmt.Sprintf("c%d-w%d-s%d-", cycle, writer, seq))
	for i := 0; i < n; i++ {
		b = append(b, byte('a'+(i+seq)%26))
	}
	return b
}

const crashParts = 24

// TestMain lets the crash test re-run this binary as the store process.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	if dir := os.Getenv(zeroCopyChildEnv); dir != "" {
		zeroCopyChild(dir)
		return
	}
	if dir := os.Getenv(fullDiskChildEnv); dir != "" {
		fullDiskChild(dir)
		return
	}
	if mode := os.Getenv(backlogChildEnv); mode != "" {
		backlogChild(mode)
		return
	}
	os.Exit(m.Run())
}

// crashChild appends under concurrent load until it is killed. An ack line
// goes to stdout only after Append returned.
func crashChild(dir string) {
	cycle, _ := strconv.Atoi(os.Getenv(crashChildEnv + "_CYCLE"))
	s, err := Open(crashOptions(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(3)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(int64(cycle*100 + w)))
			for seq := 0; ; seq++ {
				part := rnd.Intn(crashParts)
				n := 1 + rnd.Intn(3)
				msgs := make([]Message, n)
				for i := range msgs {
					msgs[i] = Message{Flag: int32(i), Body: crashBody(cycle, w, seq*4+i)}
				}
				a, err := s.Append(context.Background(), "crash", part, msgs)
				if err != nil {
					fmt.Fprintln(os.Stderr, "child append:", err)
					os.Exit(4)
				}
				var sb strings.Builder
				for i, x := range a {
					fmt.Fprintf(&sb, "%d %d %d %d %d %d\n", part, x.Offset, x.ID, w, seq*4+i, i)
				}
				mu.Lock()
				os.Stdout.WriteString(sb.String())
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
}

// crashOptions are the child's and the parent's store options;
// METAQ_STORE_CRASH_CHILD_SMALL makes segments and index blocks tiny, so
// that most kills land while a segment is being sealed (footer written,
// checkpoint not yet).
func crashOptions(dir string) Options {
	if os.Getenv(crashChildEnv+"_SMALL") != "" {
		return Options{Dir: dir, SegmentBytes: 4096, blockEntries: 4}
	}
	return Options{Dir: dir, SegmentBytes: 64 << 10}
}

type crashAck struct {
	part         int
	off, id      int64
	w, seq, flag int
	cycle        int
}

func TestCrashRecovery(t *testing.T) {
	testCrashRecovery(t, false)
}

// The same with a segment rolled (and sealed) every few appends.
func TestCrashRecoveryWhileSealing(t *testing.T) {
	testCrashRecovery(t, true)
}

func testCrashRecovery(t *testing.T, small bool) {
	if testing.Short() {
		t.Skip("crash test skipped in -short")
	}
	if small {
		t.Setenv(crashChildEnv+"_SMALL", "1")
	}
	dir := t.TempDir()
	rnd := rand.New(rand.NewSource(time.Now().UnixNano()))
	var acks []crashAck
	const cycles = 20
	for cycle := 0; cycle < cycles; cycle++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, fmt.Sprintf("%s_CYCLE=%d", crashChildEnv, cycle))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := make(chan []crashAck, 1)
		go func() {
			var list []crashAck
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				var a crashAck
				if n, _ := fmt.Sscanf(sc.Text(), "%d %d %d %d %d %d", &a.part, &a.off, &a.id, &a.w, &a.seq, &a.flag); n == 6 {
					a.cycle = cycle
					list = append(list, a)
				}
			}
			got <- list
		}()
		time.Sleep(time.Duration(30+rnd.Intn(250)) * time.Millisecond)
		cmd.Process.Kill() // SIGKILL
		list := <-got
		cmd.Wait()
		acks = append(acks, list...)

		opts := crashOptions(dir)
		opts.Logger = testutil.Logger(t, slog.LevelWarn)
		s, err := Open(opts)
		if err != nil {
			t.Fatalf("cycle %d: reopen: %v", cycle, err)
		}
		verifyCrashAcks(t, s, acks, cycle)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: %d acks this cycle, %d in total", cycle, len(list), len(acks))
	}
	if len(acks) < cycles {
		t.Fatalf("only %d acks over %d cycles: the child did not run", len(acks), cycles)
	}
}

func verifyCrashAcks(t *testing.T, s *Store, acks []crashAck, cycle int) {
	t.Helper()
	data := make(map[int][]byte)
	for p := 0; p < crashParts; p++ {
		if _, err := s.Partition("crash", p); err == nil {
			data[p] = readAll(t, s, "crash", p)
		}
	}
	for _, a := range acks {
		b := data[a.part]
		if a.off < 0 || a.off >= int64(len(b)) {
			t.Fatalf("cycle %d: acked record %+v missing (partition has %d bytes)", cycle, a, len(b))
		}
		r, _, err := DecodeRecord(b[a.off:])
		if err != nil {
			t.Fatalf("cycle %d: acked record %+v: %v", cycle, a, err)
		}
		want := crashBody(a.cycle, a.w, a.seq)
		if r.ID != a.id || r.Flag != int32(a.flag) || string(r.Body) != string(want) {
			t.Fatalf("cycle %d: record at %d differs from ack %+v", cycle, a.off, a)
		}
	}
	// every partition decodes from end to end
	for p, b := range data {
		if _, err := VerifyRecords(b); err != nil {
			t.Fatalf("cycle %d: partition %d: %v", cycle, p, err)
		}
	}
}
