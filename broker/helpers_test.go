package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

const vectorDir = "testdata/vectors"

// logCapture records log lines for assertions.
type logCapture struct {
	mu    sync.Mutex
	lines []string
	t     testing.TB
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (l *logCapture) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, x := range l.lines {
		if strings.Contains(x, s) {
			return true
		}
	}
	return false
}

func vectorConfig(t testing.TB) *config.Server {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir, "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	return parseConfig(t, data)
}

func parseConfig(t testing.TB, data []byte) *config.Server {
	t.Helper()
	cfg, _, err := config.Parse("server.ini", data)
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	return cfg
}

type testBroker struct {
	*Broker
	store *store.Store
	dir   string
}

// startBroker starts a broker on 127.0.0.1:0 over a fresh store in a temp
// dir. mod may adjust the options before New.
func startBroker(t testing.TB, cfg *config.Server, mod func(*Options)) *testBroker {
	t.Helper()
	dir := t.TempDir()
	return startBrokerDir(t, cfg, dir, mod)
}

func startBrokerDir(t testing.TB, cfg *config.Server, dir string, mod func(*Options)) *testBroker {
	t.Helper()
	st, err := store.Open(store.Options{Dir: dir, BrokerID: cfg.System.BrokerID, SegmentBytes: cfg.System.MaxSegmentSize})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	opts := Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0", Logger: testutil.Logger(t, slog.LevelDebug)}
	if mod != nil {
		mod(&opts)
	}
	b, err := New(opts)
	if err != nil {
		st.Close()
		t.Fatalf("new broker: %v", err)
	}
	if err := b.Start(context.Background()); err != nil {
		st.Close()
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() {
		b.Close()
		st.Close()
	})
	return &testBroker{Broker: b, store: st, dir: dir}
}

// client is a raw protocol connection for tests.
type client struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
	d  *wire.Decoder
}

func dial(t testing.TB, addr net.Addr) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr.String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	r := bufio.NewReader(nc)
	return &client{t: t, nc: nc, r: r, d: wire.NewDecoder(r)}
}

func (c *client) send(b []byte) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) sendCmd(cmd wire.Command) { c.t.Helper(); c.send(cmd.AppendTo(nil)) }

// readRaw reads one response frame and returns its exact bytes.
func (c *client) readRaw(timeout time.Duration) ([]byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	line, err := c.r.ReadString('\n')
	if err != nil {
		return []byte(line), err
	}
	if !strings.HasSuffix(line, "\r\n") {
		return []byte(line), fmt.Errorf("header without CRLF: %q", line)
	}
	f := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	var n int
	switch f[0] {
	case "result":
		if len(f) != 4 {
			return []byte(line), fmt.Errorf("bad result header %q", line)
		}
		n, err = strconv.Atoi(f[2])
	case "value":
		if len(f) != 3 {
			return []byte(line), fmt.Errorf("bad value header %q", line)
		}
		n, err = strconv.Atoi(f[1])
	default:
		return []byte(line), fmt.Errorf("unknown response %q", line)
	}
	if err != nil || n < 0 {
		return []byte(line), fmt.Errorf("bad length in %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		return append([]byte(line), body...), fmt.Errorf("short body: %w", err)
	}
	return append([]byte(line), body...), nil
}

// read decodes one response frame.
func (c *client) read() wire.Command {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	cmd, err := c.d.Decode()
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	return cmd
}

func (c *client) result() *wire.Result {
	c.t.Helper()
	cmd := c.read()
	r, ok := cmd.(*wire.Result)
	if !ok {
		c.t.Fatalf("got %T, want result", cmd)
	}
	return r
}

// expectClosed checks that the server closes the connection without
// sending anything.
func (c *client) expectClosed(timeout time.Duration) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(timeout))
	b, err := c.r.ReadByte()
	if err == nil {
		rest, _ := c.r.Peek(c.r.Buffered())
		c.t.Fatalf("server sent %q, want close", append([]byte{b}, rest...))
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatalf("connection still open after %v", timeout)
	}
}

// expectSilence checks that nothing arrives within d and the connection stays open.
func (c *client) expectSilence(d time.Duration) {
	c.t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(d))
	b, err := c.r.ReadByte()
	if err == nil {
		c.t.Fatalf("server sent %q, want nothing", b)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		c.t.Fatalf("connection ended: %v", err)
	}
}

func putCmd(topic string, p int32, body string, opaque int32) *wire.Put {
	return &wire.Put{Topic: topic, Partition: p, Body: []byte(body), Checksum: wire.Checksum([]byte(body)), Opaque: opaque}
}

// record is one record parsed from a value body.
type record struct {
	id   int64
	flag int32
	body []byte
	crc  int32
}

func parseRecords(t testing.TB, data []byte) (recs []record, rest []byte) {
	t.Helper()
	for len(data) >= 20 {
		n := int(binary.BigEndian.Uint32(data[0:4]))
		if len(data) < 20+n {
			break
		}
		recs = append(recs, record{
			crc:  int32(binary.BigEndian.Uint32(data[4:8])),
			id:   int64(binary.BigEndian.Uint64(data[8:16])),
			flag: int32(binary.BigEndian.Uint32(data[16:20])),
			body: data[20 : 20+n],
		})
		data = data[20+n:]
	}
	return recs, data
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// serveConns listens on loopback and runs serve on every connection
// accepted, each on a goroutine of its own, and returns the address. The
// test's cleanup closes the listener and every connection accepted (so a
// serve that reads returns) and waits for the serves to return.
func serveConns(t testing.TB, serve func(nc net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   []net.Conn
		closed bool
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, nc := range open {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				// Accepted as the cleanup ran: no serve to wait for.
				mu.Unlock()
				nc.Close()
				return
			}
			open = append(open, nc)
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				serve(nc)
			}()
		}
	}()
	return ln.Addr().String()
}
