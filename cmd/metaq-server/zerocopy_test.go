package main

import (
	"bufio"
	"bytes"
	be "encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillDuringSendfileGet kills the broker process (SIGKILL) while it
// sends a get's answer from its log files (sendfile) to a client that reads
// slowly: the client gets a correct prefix of the answer and then the end
// of the connection inside the value frame (a clean error, never other
// bytes), and the restarted broker serves every record.
func TestKillDuringSendfileGet(t *testing.T) {
	s := newServer(t, "", "[topic=zc]\nnumPartitions=1\n")
	// An answer larger than the socket buffers can take (the kernel
	// delivers what a killed process left in them): 16 MiB.
	ini, err := os.ReadFile(s.ini)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(s.ini, bytes.Replace(ini, []byte("maxTransferSize=1048576"), []byte("maxTransferSize=16777216"), 1), 0o644)
	pid := s.startMode(t, "")
	w := dialWire(t, s.addr())
	payload := func(i int) string { return fmt.Sprintf("%04d-", i) + strings.Repeat(string(rune('a'+i%26)), 50000) }
	const n = 360 // 18 MB in 1 MiB segments
	for i := range n {
		if code, body, err := w.putMsg("zc", 0, payload(i)); err != nil || code != 200 {
			t.Fatalf("put %d: %d %q %v", i, code, body, err)
		}
	}
	var c net.Conn
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err = d.Dial("tcp", s.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte("get zc g 0 0 16777216 1\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 4096)
	line, err := r.ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "value" {
		t.Fatalf("answer header %q %v", line, err)
	}
	size, _ := strconv.Atoi(f[1])
	got := make([]byte, 64<<10)
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid)
	rest, _ := io.ReadAll(r)
	got = append(got, rest...)
	if len(got) >= size {
		t.Fatalf("the whole answer (%d bytes) arrived: the kill did not interrupt it", size)
	}

	s.startMode(t, "")
	w2 := dialWire(t, s.addr())
	code, all, err := w2.call("get zc g 0 0 16777216", nil)
	if err != nil || code != 0 {
		t.Fatalf("get after restart: %d %v", code, err)
	}
	if len(all) != size || !bytes.Equal(got, all[:len(got)]) {
		t.Fatalf("the client's %d bytes are not a prefix of the %d-byte answer after the restart (was %d)", len(got), len(all), size)
	}
	for i := 0; len(all) >= 20; i++ {
		l := int(be.BigEndian.Uint32(all))
		if len(all) < 20+l {
			break
		}
		if string(all[20:20+l]) != payload(i) {
			t.Fatalf("record %d differs after the restart", i)
		}
		all = all[20+l:]
	}
	t.Logf("client got %d of %d bytes before the kill ended the connection", len(got), size)
}
