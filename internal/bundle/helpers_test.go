package bundle

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// testEnv is one bundle's files: a server.ini in a temp dir with a unique
// ZooKeeper root and a free port.
type testEnv struct {
	dir, ini, root, zk string
	port               int
}

func newEnv(t *testing.T, topics string) *testEnv {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	e := &testEnv{
		dir:  t.TempDir(),
		root: "/metaq-test-" + hex.EncodeToString(b),
		zk:   testutil.ZooKeeper(t),
		port: testutil.FreePort(t),
	}
	e.ini = filepath.Join(e.dir, "server.ini")
	e.writeINI(t, topics)
	t.Cleanup(func() { removeTree(e.zk, e.root) })
	return e
}

func (e *testEnv) writeINI(t *testing.T, topics string) {
	t.Helper()
	ini := fmt.Sprintf(`[system]
brokerId=0
hostName=127.0.0.1
serverPort=%d
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576
dataPath=%s
updateConsumerOffsets=false

[zookeeper]
zk.zkConnect=%s
zk.zkRoot=%s
zk.zkSessionTimeoutMs=5000
zk.zkConnectionTimeoutMs=10000
zk.zkSyncTimeMs=100

%s`, e.port, filepath.Join(e.dir, "data"), e.zk, e.root, topics)
	if err := os.WriteFile(e.ini, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *testEnv) start(t *testing.T) *Bundle {
	t.Helper()
	return startBundle(t, Options{
		ConfigPath: e.ini,
		Logger:     testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(e.port),
		AdminAddr:  "127.0.0.1:0",
	})
}

// startBundle builds and starts a bundle, closed when the test ends.
func startBundle(t testing.TB, opts Options) *Bundle {
	t.Helper()
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

// zkClient opens a plain ZooKeeper session on the test root.
func zkClient(t testing.TB, e *testEnv) *registry.Registry {
	t.Helper()
	r, err := registry.New(context.Background(), registry.Options{Connect: e.zk, Root: e.root, SessionTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func removeTree(zk, root string) {
	r, err := registry.New(context.Background(), registry.Options{Connect: zk, ConnectionTimeout: 5 * time.Second})
	if err != nil {
		return
	}
	defer r.Close()
	r.DeleteTree(context.Background(), root)
}

// metaConn is a minimal MetaQ protocol client (see the protocol in broker/wire/doc.go), one request at a time.
type metaConn struct {
	c      net.Conn
	r      *bufio.Reader
	opaque int32
}

func dialMeta(addr string) (*metaConn, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	return &metaConn{c: c, r: bufio.NewReader(c), opaque: -2147483648}, nil
}

func (m *metaConn) Close() error { return m.c.Close() }

// reply is one answer: a result (code, body) or a value (code 0, data).
type reply struct {
	code int
	body []byte
}

func (m *metaConn) roundTrip(header string, body []byte) (reply, error) {
	m.c.SetDeadline(time.Now().Add(10 * time.Second))
	op := m.opaque
	m.opaque++
	if _, err := m.c.Write(append([]byte(header+" "+strconv.Itoa(int(op))+"\r\n"), body...)); err != nil {
		return reply{}, err
	}
	line, err := m.r.ReadString('\n')
	if err != nil {
		return reply{}, err
	}
	f := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	var code, n int
	switch {
	case len(f) == 4 && f[0] == "result":
		code, _ = strconv.Atoi(f[1])
		n, _ = strconv.Atoi(f[2])
	case len(f) == 3 && f[0] == "value":
		n, _ = strconv.Atoi(f[1])
	default:
		return reply{}, fmt.Errorf("bad answer %q", line)
	}
	if f[len(f)-1] != strconv.Itoa(int(op)) {
		return reply{}, fmt.Errorf("answer %q for opaque %d", line, op)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(m.r, data); err != nil {
		return reply{}, err
	}
	return reply{code: code, body: data}, nil
}

// put sends the 7-field put with checksum and returns id and offset.
func (m *metaConn) put(topic string, partition int, payload []byte) (id, offset int64, err error) {
	crc := crc32.ChecksumIEEE(payload) & 0x7FFFFFFF
	rep, err := m.roundTrip(fmt.Sprintf("put %s %d %d 0 %d", topic, partition, len(payload), crc), payload)
	if err != nil {
		return 0, 0, err
	}
	if rep.code != 200 {
		return 0, 0, fmt.Errorf("put: %d %s", rep.code, rep.body)
	}
	f := strings.Fields(string(rep.body))
	if len(f) != 3 {
		return 0, 0, fmt.Errorf("put answer %q", rep.body)
	}
	id, _ = strconv.ParseInt(f[0], 10, 64)
	offset, _ = strconv.ParseInt(f[2], 10, 64)
	return id, offset, nil
}

func (m *metaConn) get(topic, group string, partition int, offset int64, max int) (reply, error) {
	return m.roundTrip(fmt.Sprintf("get %s %s %d %d %d", topic, group, partition, offset, max), nil)
}

// record is one decoded stored message (see Records in broker/wire/doc.go).
type record struct {
	id      int64
	payload []byte
	end     int64 // partition offset after the record
}

// decodeRecords decodes the whole records of a get answer that started at
// offset; a partial record at the end is ignored, as the Java client does.
func decodeRecords(data []byte, offset int64) ([]record, error) {
	var out []record
	for len(data) >= 20 {
		n := int(binary.BigEndian.Uint32(data))
		if len(data) < 20+n {
			break
		}
		body := data[20 : 20+n]
		if crc32.ChecksumIEEE(body)&0x7FFFFFFF != binary.BigEndian.Uint32(data[4:]) {
			return out, fmt.Errorf("checksum mismatch at %d", offset)
		}
		offset += int64(20 + n)
		out = append(out, record{id: int64(binary.BigEndian.Uint64(data[8:])), payload: append([]byte(nil), body...), end: offset})
		data = data[20+n:]
	}
	return out, nil
}

// editINI replaces the first from in e's server.ini with to.
func editINI(t *testing.T, e *testEnv, from, to string) {
	t.Helper()
	ini, err := os.ReadFile(e.ini)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.ini, bytes.Replace(ini, []byte(from), []byte(to), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}
