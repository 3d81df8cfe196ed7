package bundle

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry"
)

// The contrib producers (see Contrib clients in broker/wire/doc.go; contrib/python …/producer.py,
// contrib/ruby …/metaq.rb) find brokers through the deprecated topics tree
// and send the 6-field put without checksum, one request at a time. These
// tests follow exactly their steps against a bundle registered in the real
// ZooKeeper, then read the messages back with `get`.

// contribPartition is one (brokerId, partition) of the old layout.
type contribPartition struct{ broker, partition int }

// contribDiscover reads <root>/brokers/topics/<topic>: children ending in
// -m, their plain numParts value, and each broker's url from
// <root>/brokers/ids/<id>/master. Partitions are sorted by broker then
// partition, as both clients sort them.
func contribDiscover(t *testing.T, zk *registry.Registry, root, topic string) (map[int]string, []contribPartition) {
	t.Helper()
	ctx := context.Background()
	dir := root + "/brokers/topics/" + topic
	kids, err := zk.Children(ctx, dir)
	if err != nil {
		t.Fatalf("children of %s: %v", dir, err)
	}
	urls := map[int]string{}
	var parts []contribPartition
	for _, k := range kids {
		if !strings.HasSuffix(k, "-m") {
			continue
		}
		id, err := strconv.Atoi(strings.TrimSuffix(k, "-m"))
		if err != nil {
			t.Fatalf("child %q: %v", k, err)
		}
		u, _, err := zk.Get(ctx, root+"/brokers/ids/"+strconv.Itoa(id)+"/master")
		if err != nil {
			t.Fatalf("master of %d: %v", id, err)
		}
		n, _, err := zk.Get(ctx, dir+"/"+k)
		if err != nil {
			t.Fatal(err)
		}
		num, err := strconv.Atoi(string(n)) // a plain number, no JSON
		if err != nil {
			t.Fatalf("%s/%s = %q: the contrib clients need a plain partition count", dir, k, n)
		}
		urls[id] = string(u)
		for p := range num {
			parts = append(parts, contribPartition{id, p})
		}
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].broker != parts[j].broker {
			return parts[i].broker < parts[j].broker
		}
		return parts[i].partition < parts[j].partition
	})
	return urls, parts
}

// javaInt is the clients' opaque and round-robin counter: a Java int
// counted up from MinInt32, read after the increment, wrapping at MaxInt32.
type javaInt struct{ v int32 }

func newJavaInt() *javaInt { return &javaInt{v: -2147483648} }

func (j *javaInt) next() int32 {
	if j.v == 2147483646 { // the next value would be MaxInt32
		j.v = -2147483648
	} else {
		j.v++
	}
	return j.v
}

// pyMod is Python's %, never negative for a positive divisor.
func pyMod(a int32, n int) int { return ((int(a) % n) + n) % n }

// contribConn is one producer connection: write a request, read the
// `result` line and body, check the opaque.
type contribConn struct {
	c net.Conn
	r *bufio.Reader
}

func contribDial(t *testing.T, metaURL string) *contribConn {
	t.Helper()
	u, err := url.Parse(metaURL)
	if err != nil || u.Scheme != "meta" {
		t.Fatalf("broker url %q: %v", metaURL, err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).SetNoDelay(true)
	t.Cleanup(func() { c.Close() })
	return &contribConn{c: c, r: bufio.NewReader(c)}
}

func (cc *contribConn) request(req []byte, opaque int32) (int, []byte, error) {
	cc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := cc.c.Write(req); err != nil {
		return 0, nil, err
	}
	line, err := cc.r.ReadString('\n')
	if err != nil {
		return 0, nil, err
	}
	f := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	if len(f) != 4 || f[0] != "result" {
		return 0, nil, fmt.Errorf("answer line %q", line)
	}
	status, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[2])
	op, err3 := strconv.ParseInt(f[3], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, nil, fmt.Errorf("answer line %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(cc.r, body); err != nil {
		return 0, nil, err
	}
	if int32(op) != opaque {
		return 0, nil, fmt.Errorf("answer opaque %d for request %d", op, opaque)
	}
	return status, body, nil
}

// contribMessage is one message sent and where the broker put it.
type contribMessage struct {
	Broker    int     `json:"broker"`
	Partition int     `json:"partition"`
	ID        int64   `json:"id"`
	Offset    int64   `json:"offset"`
	Data      string  `json:"data"`
	Attr      *string `json:"attr"`
}

// storedRecord is one record read back: id, flag and body.
type storedRecord struct {
	id   int64
	flag int32
	body []byte
}

func firstRecord(t *testing.T, data []byte) storedRecord {
	t.Helper()
	if len(data) < 20 {
		t.Fatalf("get answered %d bytes", len(data))
	}
	n := int(binary.BigEndian.Uint32(data))
	if len(data) < 20+n {
		t.Fatalf("partial record: %d of %d bytes", len(data), 20+n)
	}
	body := data[20 : 20+n]
	if crc32.ChecksumIEEE(body)&0x7FFFFFFF != binary.BigEndian.Uint32(data[4:]) {
		t.Fatal("record checksum does not match")
	}
	return storedRecord{
		id:   int64(binary.BigEndian.Uint64(data[8:])),
		flag: int32(binary.BigEndian.Uint32(data[16:])),
		body: body,
	}
}

// checkReadBack fetches each message at its offset with `get` and compares
// id, flag and body (attribute section: int32 length, attribute, payload).
func checkReadBack(t *testing.T, addr, topic string, sent []contribMessage) {
	t.Helper()
	mc, err := dialMeta(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	parts := map[int]bool{}
	for _, m := range sent {
		parts[m.Partition] = true
		rep, err := mc.get(topic, "contrib-check", m.Partition, m.Offset, 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		r := firstRecord(t, rep.body)
		want := []byte(m.Data)
		var flag int32
		if m.Attr != nil {
			flag = 1
			want = binary.BigEndian.AppendUint32(nil, uint32(len(*m.Attr)))
			want = append(append(want, *m.Attr...), m.Data...)
		}
		if r.id != m.ID || r.flag != flag || !bytes.Equal(r.body, want) {
			t.Errorf("%s-%d@%d: id %d flag %d body %q, want id %d flag %d body %q",
				topic, m.Partition, m.Offset, r.id, r.flag, r.body, m.ID, flag, want)
		}
	}
	if len(parts) < 2 {
		t.Errorf("round robin used partitions %v only", parts)
	}
}

// TestContribProducerPath follows the Python/Ruby producer steps.
func TestContribProducerPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=contrib]\nnumPartitions=3\n")
	b := e.start(t)
	zk := zkClient(t, e)

	urls, parts := contribDiscover(t, zk, e.root, "contrib")
	if len(parts) != 3 || urls[0] != "meta://127.0.0.1:"+strconv.Itoa(e.port) {
		t.Fatalf("discovered %v %v", urls, parts)
	}
	conns := map[int]*contribConn{}
	for id, u := range urls {
		conns[id] = contribDial(t, u)
	}

	opaques, selector := newJavaInt(), newJavaInt()
	var sent []contribMessage
	for i := range 9 {
		m := contribMessage{Data: "go-" + strconv.Itoa(i)}
		payload, flag := []byte(m.Data), 0
		if i%3 == 1 {
			attr := "attr-" + strconv.Itoa(i)
			m.Attr = &attr
			flag = 1 // flag & 0xFFFFFFFE | 1
			payload = append(binary.BigEndian.AppendUint32(nil, uint32(len(attr))), attr...)
			payload = append(payload, m.Data...)
		}
		p := parts[pyMod(selector.next(), len(parts))]
		op := opaques.next()
		if i == 0 && op != -2147483647 {
			t.Fatalf("first opaque %d", op)
		}
		// The 6-field put: no checksum.
		req := append([]byte(fmt.Sprintf("put contrib %d %d %d %d\r\n", p.partition, len(payload), flag, op)), payload...)
		status, body, err := conns[p.broker].request(req, op)
		if err != nil || status != 200 {
			t.Fatalf("put %d: %d %q %v", i, status, body, err)
		}
		f := strings.Split(string(body), " ")
		if len(f) != 3 {
			t.Fatalf("put answer %q", body)
		}
		m.ID, _ = strconv.ParseInt(f[0], 10, 64)
		m.Partition, _ = strconv.Atoi(f[1])
		m.Offset, _ = strconv.ParseInt(f[2], 10, 64)
		m.Broker = p.broker
		if m.Partition != p.partition {
			t.Errorf("put to partition %d answered partition %d", p.partition, m.Partition)
		}
		sent = append(sent, m)
	}
	// The Python producer's heartbeat on an idle connection.
	for _, cc := range conns {
		op := opaques.next()
		status, body, err := cc.request([]byte(fmt.Sprintf("version %d\r\n", op)), op)
		if err != nil || status != 200 || len(body) == 0 {
			t.Fatalf("version heartbeat: %d %q %v", status, body, err)
		}
	}
	checkReadBack(t, b.Broker.Addr().String(), "contrib", sent)
}

// contribPython returns a python3 that has kazoo (Debian: python3-kazoo),
// or "" when there is none.
func contribPython() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil {
			if exec.Command(path, "-c", "import kazoo.client").Run() == nil {
				return path
			}
		}
	}
	return ""
}

// TestContribPythonProducer runs testdata/contrib_producer.py, a small
// producer written for this test that takes the same steps as the contrib
// Python client, against the bundle, and reads its messages back.
func TestContribPythonProducer(t *testing.T) {
	t.Parallel()
	py := contribPython()
	if py == "" {
		t.Skip("no python3 with kazoo (apt-get install python3-kazoo)")
	}
	e := newEnv(t, "[topic=contrib-py]\nnumPartitions=2\n")
	b := e.start(t)
	script, _ := filepath.Abs("testdata/contrib_producer.py")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, e.zk, e.root, "contrib-py", "7")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	var sent []contribMessage
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m contribMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("script output %q: %v", line, err)
		}
		sent = append(sent, m)
	}
	if len(sent) != 7 || sent[1].Attr == nil {
		t.Fatalf("script sent %+v", sent)
	}
	checkReadBack(t, b.Broker.Addr().String(), "contrib-py", sent)
}
