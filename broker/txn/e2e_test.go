package txn

import (
	"bufio"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

const e2eINI = `[system]
brokerId=0
numPartitions=2
unflushThreshold=0
unflushInterval=10000
maxSegmentSize=1073741824
maxTransferSize=1048576
[zookeeper]
zk.zkEnable=false
[topic=test]
`

// site is one broker with its store and transaction manager on a data dir
// that survives restarts.
type site struct {
	st  *store.Store
	m   *Manager
	brk *broker.Broker
}

// openSite opens a store, transaction manager and started broker on dir.
func openSite(t testing.TB, dir string) *site {
	t.Helper()
	cfg, _, err := config.Parse("server.ini", []byte(e2eINI))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(store.Options{Dir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Open(Options{Dir: filepath.Join(dir, "transactions"), Store: st, NextID: st.NextID, FlushAtCommit: 1})
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	b.SetTxHandler(NewHandler(m, b))
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &site{st: st, m: m, brk: b}
}

func startSite(t *testing.T, dir string) *site {
	t.Helper()
	s := openSite(t, dir)
	t.Cleanup(s.stop)
	return s
}

func (s *site) stop() {
	s.brk.Close()
	s.m.Close()
	s.st.Close()
}

type rawClient struct {
	t      *testing.T
	nc     net.Conn
	d      *wire.Decoder
	opaque int32
}

func dialSite(t *testing.T, s *site) *rawClient {
	t.Helper()
	nc, err := net.Dial("tcp", s.brk.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawClient{t: t, nc: nc, d: wire.NewDecoder(bufio.NewReader(nc)), opaque: -2147483648}
}

// do sends cmd with the next opaque and returns the answer.
func (c *rawClient) do(cmd wire.Command) wire.Command {
	c.t.Helper()
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(cmd.AppendTo(nil)); err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.d.Decode()
	if err != nil {
		c.t.Fatalf("reading answer to %s: %v", cmd.Name(), err)
	}
	return resp
}

func (c *rawClient) next() int32 { c.opaque++; return c.opaque }

func (c *rawClient) tx(key string, typ wire.TxType, uq string) *wire.Result {
	c.t.Helper()
	id, err := wire.ParseTxKey(key)
	if err != nil {
		c.t.Fatal(err)
	}
	r, ok := c.do(&wire.Transaction{TxKey: key, Tx: id, SessionID: "s1", Type: typ, UniqueQualifier: uq, Opaque: c.next()}).(*wire.Result)
	if !ok {
		c.t.Fatalf("%s: answer is not a result", typ)
	}
	return r
}

func (c *rawClient) txPut(key, body string) *wire.Result {
	c.t.Helper()
	id, _ := wire.ParseTxKey(key)
	b := []byte(body)
	return c.do(&wire.Put{Topic: "test", Partition: 0, Checksum: wire.Checksum(b), TxKey: key, Tx: id, Body: b, Opaque: c.next()}).(*wire.Result)
}

// bodies reads partition test-0 through `get` and returns the payloads.
func (c *rawClient) bodies() []string {
	c.t.Helper()
	resp := c.do(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 0, MaxSize: 1 << 20, Opaque: c.next()})
	v, ok := resp.(*wire.Value)
	if !ok {
		return nil
	}
	var out []string
	data := v.Data
	for len(data) >= 20 {
		n := int(data[0])<<24 | int(data[1])<<16 | int(data[2])<<8 | int(data[3])
		out = append(out, string(data[20:20+n]))
		data = data[20+n:]
	}
	return out
}

func TestPreparedXASurvivesRestartOverTheWire(t *testing.T) {
	dir := t.TempDir()
	s := startSite(t, dir)
	c := dialSite(t, s)
	const uq = "XAMessageProducer-host"
	key := "XID:1:676c6f62616c31:6272616e636831:" + uq
	if r := c.tx(key, wire.TxBegin, uq); !r.OK() {
		t.Fatalf("begin: %d %s", r.Code, r.Body)
	}
	for _, b := range []string{"first", "second"} {
		if r := c.txPut(key, b); !r.OK() || !strings.HasSuffix(string(r.Body), " 0 -1") {
			t.Fatalf("put %s: %d %s", b, r.Code, r.Body)
		}
	}
	if r := c.tx(key, wire.TxPrepare, uq); !r.OK() || string(r.Body) != "0" {
		t.Fatalf("prepare: %d %s", r.Code, r.Body)
	}
	if got := c.bodies(); len(got) != 0 {
		t.Fatalf("prepared messages visible: %v", got)
	}
	s.stop()

	s2 := startSite(t, dir)
	c2 := dialSite(t, s2)
	if r := c2.tx("null", wire.TxRecover, uq); !r.OK() || string(r.Body) != key {
		t.Fatalf("recover after restart: %d %q", r.Code, r.Body)
	}
	if r := c2.tx(key, wire.TxCommitTwoPhase, uq); !r.OK() {
		t.Fatalf("commit after restart: %d %s", r.Code, r.Body)
	}
	if got := c2.bodies(); len(got) != 2 || got[0] != "first" || got[1] != "second" {
		t.Fatalf("after commit: %v", got)
	}
	if r := c2.tx("null", wire.TxRecover, uq); !r.OK() || len(r.Body) != 0 {
		t.Fatalf("recover after commit: %q", r.Body)
	}
}

func TestDroppedConnectionRollsBackLocal(t *testing.T) {
	s := startSite(t, t.TempDir())
	c := dialSite(t, s)
	key := "TX:s1:1"
	if r := c.tx(key, wire.TxBegin, ""); !r.OK() {
		t.Fatalf("begin: %d %s", r.Code, r.Body)
	}
	if r := c.txPut(key, "orphan"); !r.OK() {
		t.Fatalf("put: %d %s", r.Code, r.Body)
	}
	c.nc.Close()
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if l, _ := s.m.Count(); l != 0 {
			return errString("local transaction still open after its connection closed")
		}
		return nil
	})
	c2 := dialSite(t, s)
	if r := c2.tx(key, wire.TxCommitOnePhase, ""); r.OK() || string(r.Body) != "Local transaction 'TX:s1:1' has not been started." {
		t.Fatalf("commit from a new connection: %d %s", r.Code, r.Body)
	}
	if got := c2.bodies(); len(got) != 0 {
		t.Fatalf("rolled back message visible: %v", got)
	}
}

type errString string

func (e errString) Error() string { return string(e) }
