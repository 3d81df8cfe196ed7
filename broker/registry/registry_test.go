package registry

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

func testRoot(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	return "/metaq-test-" + hex.EncodeToString(b)
}

func testOptions(t *testing.T, root string) Options {
	return Options{
		Connect:           testutil.ZooKeeper(t),
		Root:              root,
		SessionTimeout:    4 * time.Second,
		ConnectionTimeout: 10 * time.Second,
		SyncTime:          50 * time.Millisecond,
		BrokerID:          0,
		Host:              "127.0.0.1",
		Port:              8123,
	}
}

func newRegistry(t *testing.T, opts Options) *Registry {
	t.Helper()
	r, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// cleanupRoot removes a test root recursively with a fresh session.
func cleanupRoot(t *testing.T, root string) {
	t.Cleanup(func() {
		opts := testOptions(t, root)
		r, err := New(context.Background(), opts)
		if err != nil {
			return
		}
		defer r.Close()
		r.DeleteTree(context.Background(), root)
	})
}

type vectorNode struct {
	path, kind, value string
}

// loadVector reads testdata/zookeeper.txt (a copy of the spec's vector) with
// /meta replaced by root.
func loadVector(t *testing.T, root string) []vectorNode {
	t.Helper()
	f, err := os.Open("testdata/zookeeper.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []vectorNode
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lhs, value, ok := strings.Cut(line, " = ")
		if !ok {
			t.Fatalf("bad vector line %q", line)
		}
		path, kind, ok := strings.Cut(lhs, " ")
		if !ok {
			t.Fatalf("bad vector line %q", line)
		}
		out = append(out, vectorNode{path: root + strings.TrimPrefix(path, "/meta"), kind: kind, value: value})
	}
	return out
}

func checkNode(t *testing.T, r *Registry, n vectorNode) {
	t.Helper()
	data, st, err := r.Get(context.Background(), n.path)
	if err != nil {
		t.Errorf("%s: %v", n.path, err)
		return
	}
	if string(data) != n.value {
		t.Errorf("%s = %q, want %q", n.path, data, n.value)
	}
	kind := "P"
	if st.EphemeralOwner != 0 {
		kind = "E"
	}
	if kind != n.kind {
		t.Errorf("%s is %s, want %s", n.path, kind, n.kind)
	}
}

func vectorChecksum(t *testing.T) uint32 {
	raw, err := os.ReadFile("testdata/server.ini")
	if err != nil {
		t.Fatal(err)
	}
	return crc32.ChecksumIEEE(raw)
}

// TestRegisterMatchesVector registers a master and an async slave as the
// vector describes and compares every broker znode, kind and value.
func TestRegisterMatchesVector(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()

	mo := testOptions(t, root)
	mo.ConfigChecksum = vectorChecksum(t)
	if mo.ConfigChecksum != 1207089588 {
		t.Fatalf("checksum of vectors/server.ini = %d, the vector says 1207089588", mo.ConfigChecksum)
	}
	master := newRegistry(t, mo)
	if err := master.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := master.RegisterTopic(ctx, "test", 2, true, true); err != nil {
		t.Fatal(err)
	}

	so := testOptions(t, root)
	so.Slave, so.SlaveID = true, 0
	so.Host = "127.0.0.2"
	slave := newRegistry(t, so)
	if err := slave.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := slave.RegisterTopic(ctx, "test", 2, true, true); err != nil {
		t.Fatal(err)
	}

	var brokerNodes int
	for _, n := range loadVector(t, root) {
		if strings.Contains(n.path, "/consumers/") {
			continue
		}
		brokerNodes++
		checkNode(t, master, n)
	}
	if brokerNodes != 10 {
		t.Fatalf("vector has %d broker nodes, want 10", brokerNodes)
	}
	// Exactly these children: nothing extra under the broker id or topics.
	kids, err := master.Children(ctx, root+"/brokers/ids/0")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sorted(kids), ","); got != "master,master_config_checksum,slave0" {
		t.Errorf("ids/0 children = %s", got)
	}

	// The read helpers see the same registration.
	bs, err := master.Brokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Master != "meta://127.0.0.1:8123" || bs[0].Slaves[0] != "meta://127.0.0.2:8123" {
		t.Errorf("Brokers = %+v", bs)
	}
	tb, err := master.TopicBrokers(ctx, TreeTopicsPub, "test")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tb) != "[{0-m 0 -1 2} {0-s0 0 0 2}]" {
		t.Errorf("TopicBrokers = %v", tb)
	}
	if topics, _ := master.Topics(ctx, TreeTopics); fmt.Sprint(topics) != "[test]" {
		t.Errorf("Topics = %v", topics)
	}
}

// TestSetURLIsRegistered checks that the URL the broker sets (its listener,
// which may not be on serverPort) is the one written, instead of Host:Port.
func TestSetURLIsRegistered(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	o := testOptions(t, root)
	r := newRegistry(t, o)
	r.SetURL("meta://127.0.0.1:40999")
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	bs, err := r.Brokers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 1 || bs[0].Master != "meta://127.0.0.1:40999" {
		t.Fatalf("Brokers = %+v, want the master at meta://127.0.0.1:40999 (Options.Port is %d)", bs, o.Port)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestConsumerOffsets writes the vector's consumer offsets as the Java client
// does and reads them back, including the pre-1.4 plain form.
func TestConsumerOffsets(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	r := newRegistry(t, testOptions(t, root))
	for _, n := range loadVector(t, root) {
		if strings.Contains(n.path, "/offsets/") {
			if err := r.SetPersistent(ctx, n.path, []byte(n.value)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.SetPersistent(ctx, r.Paths().ConsumerOffsets("meta-example", "old")+"/3-0", []byte("77")); err != nil {
		t.Fatal(err)
	}
	if err := r.CommitOffset(ctx, "meta-example", "test", 1, 0, -5468927451604189184, 25); err != nil {
		t.Fatal(err)
	}
	got, err := r.ConsumerOffsets(ctx, "meta-example", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Offset{
		{Topic: "old", Partition: "3-0", BrokerID: 3, Part: 0, MsgID: -1, Offset: 77},
		{Topic: "test", Partition: "0-0", BrokerID: 0, Part: 0, MsgID: 1234567890124, Offset: 58},
		{Topic: "test", Partition: "0-1", BrokerID: 0, Part: 1, MsgID: -1, Offset: 0},
		{Topic: "test", Partition: "1-0", BrokerID: 1, Part: 0, MsgID: -5468927451604189184, Offset: 25},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ConsumerOffsets =\n%v\nwant\n%v", got, want)
	}
	data, st, err := r.Get(ctx, r.Paths().ConsumerOffsets("meta-example", "test")+"/1-0")
	if err != nil || string(data) != "-5468927451604189184-25" || st.EphemeralOwner != 0 {
		t.Errorf("committed node = %q owner %x err %v", data, st.EphemeralOwner, err)
	}
	if gs, _ := r.Groups(ctx); fmt.Sprint(gs) != "[meta-example]" {
		t.Errorf("Groups = %v", gs)
	}
}

func TestParseOffset(t *testing.T) {
	for _, c := range []struct {
		in         string
		msgID, off int64
		bad        bool
	}{
		{in: "1234567890124-58", msgID: 1234567890124, off: 58},
		{in: "-1-0", msgID: -1, off: 0},
		{in: "-1-25", msgID: -1, off: 25},
		{in: "-5468927451604189184-25", msgID: -5468927451604189184, off: 25},
		{in: "42", msgID: -1, off: 42},
		{in: "", bad: true},
		{in: "x-1", bad: true},
		{in: "1-", bad: true},
	} {
		t.Run(c.in, func(t *testing.T) {
			m, o, err := ParseOffset(c.in)
			if c.bad {
				if err == nil {
					t.Fatalf("ParseOffset(%q) = %d,%d, want error", c.in, m, o)
				}
				return
			}
			if err != nil || m != c.msgID || o != c.off {
				t.Fatalf("ParseOffset(%q) = %d,%d,%v", c.in, m, o, err)
			}
			if c.in != "42" && FormatOffset(m, o) != c.in {
				t.Fatalf("FormatOffset = %q", FormatOffset(m, o))
			}
		})
	}
}

func TestNormalizeRootAndNames(t *testing.T) {
	for in, want := range map[string]string{"": "/meta", "meta": "/meta", "/meta/": "/meta", "/a/b//": "/a/b"} {
		if got := NormalizeRoot(in); got != want {
			t.Errorf("NormalizeRoot(%q) = %q, want %q", in, got, want)
		}
	}
	if BrokerString(3, -1) != "3-m" || BrokerString(3, 2) != "3-s2" {
		t.Error("BrokerString")
	}
	if id, s, ok := ParseBrokerString("12-s3"); !ok || id != 12 || s != 3 {
		t.Error("ParseBrokerString 12-s3")
	}
	if _, _, ok := ParseBrokerString("12-x"); ok {
		t.Error("ParseBrokerString 12-x accepted")
	}
	if n, err := ParseTopicValue([]byte(`{"numParts":7,"broker":"1-m"}`)); err != nil || n != 7 {
		t.Error("ParseTopicValue json")
	}
}

// TestSessionExpiryReregisters kills the broker's session from outside and
// checks that every node comes back, owned by the new session.
func TestSessionExpiryReregisters(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	tap := &zktest.Tap{}
	opts := testOptions(t, root)
	opts.Dialer = tap.Dial
	opts.ConfigChecksum = 99
	r := newRegistry(t, opts)
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTopic(ctx, "orders", 3, true, false); err != nil {
		t.Fatal(err)
	}
	newSession := make(chan struct{}, 1)
	r.OnNewSession(func() { newSession <- struct{}{} })

	obs := newRegistry(t, testOptions(t, root)) // observer
	master := root + "/brokers/ids/0/master"
	_, st, err := obs.Get(ctx, master)
	if err != nil {
		t.Fatal(err)
	}
	oldOwner := st.EphemeralOwner
	session, passwd := tap.Credentials()
	if session != r.SessionID() || len(passwd) == 0 {
		t.Fatalf("tap saw session 0x%x, registry has 0x%x", session, r.SessionID())
	}
	if err := zktest.ExpireSession(opts.Connect, session, passwd); err != nil {
		t.Fatal(err)
	}

	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		_, st, err := obs.Get(ctx, master)
		if err != nil {
			return err
		}
		if st.EphemeralOwner == oldOwner {
			return errors.New("master node still owned by the old session")
		}
		if st.EphemeralOwner != r.SessionID() {
			return fmt.Errorf("master owned by 0x%x, registry session 0x%x", st.EphemeralOwner, r.SessionID())
		}
		for _, p := range []string{"/brokers/topics/orders/0-m", "/brokers/topics-pub/orders/0-m", "/brokers/ids/0/master_config_checksum"} {
			if ok, _, err := obs.Exists(ctx, root+p); err != nil || !ok {
				return fmt.Errorf("%s missing (%v)", p, err)
			}
		}
		return nil
	})
	for _, n := range []vectorNode{
		{root + "/brokers/ids/0", "P", "meta://127.0.0.1:8123"},
		{root + "/brokers/ids/0/master", "E", "meta://127.0.0.1:8123"},
		{root + "/brokers/ids/0/master_config_checksum", "E", "99"},
		{root + "/brokers/topics/orders/0-m", "E", "3"},
		{root + "/brokers/topics-pub/orders/0-m", "E", `{"numParts":3,"broker":"0-m"}`},
	} {
		checkNode(t, obs, n)
	}
	if ok, _, _ := obs.Exists(ctx, root+"/brokers/topics-sub/orders/0-m"); ok {
		t.Error("topics-sub node exists although acceptSubscribe=false")
	}
	select {
	case <-newSession:
	case <-time.After(10 * time.Second):
		t.Error("OnNewSession callback not called")
	}
}

// TestCleanStop unregisters a master while its slave is registered (ids/<id>
// stays with an empty value), then the slave (everything of it goes), and
// checks UnregisterAll waits zkSyncTimeMs.
func TestCleanStop(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	mo := testOptions(t, root)
	mo.SyncTime = 300 * time.Millisecond
	master := newRegistry(t, mo)
	so := testOptions(t, root)
	so.Slave, so.SlaveID = true, 1
	slave := newRegistry(t, so)
	for _, r := range []*Registry{master, slave} {
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "test", 2, true, true); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := master.UnregisterAll(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < mo.SyncTime {
		t.Errorf("UnregisterAll returned after %v, before zkSyncTimeMs %v", d, mo.SyncTime)
	}
	checkNode(t, slave, vectorNode{root + "/brokers/ids/0", "P", ""})
	for _, p := range []string{"/brokers/ids/0/master", "/brokers/ids/0/master_config_checksum",
		"/brokers/topics/test/0-m", "/brokers/topics-pub/test/0-m", "/brokers/topics-sub/test/0-m"} {
		if ok, _, _ := slave.Exists(ctx, root+p); ok {
			t.Errorf("%s still exists after the master's clean stop", p)
		}
	}
	for _, p := range []string{"/brokers/ids/0/slave1", "/brokers/topics/test/0-s1", "/brokers/topics-sub/test/0-s1"} {
		if ok, _, _ := slave.Exists(ctx, root+p); !ok {
			t.Errorf("%s removed by the master's clean stop", p)
		}
	}
	if b, topics := master.Registered(); b || len(topics) != 0 {
		t.Errorf("Registered after UnregisterAll = %v %v", b, topics)
	}
	if err := slave.UnregisterAll(ctx); err != nil {
		t.Fatal(err)
	}
	kids, err := master.Children(ctx, root+"/brokers/ids/0")
	if err != nil || len(kids) != 0 {
		t.Errorf("ids/0 children after both stopped: %v %v", kids, err)
	}
	for _, tree := range []Tree{TreeTopics, TreeTopicsPub, TreeTopicsSub} {
		if tb, _ := master.TopicBrokers(ctx, tree, "test"); len(tb) != 0 {
			t.Errorf("%s/test still has %v", tree, tb)
		}
	}
	// While clients are connected the wait goes on; once none is, it ends
	// before zkSyncTimeMs (an hour here).
	long := testOptions(t, root)
	long.SyncTime = time.Hour
	idle := newRegistry(t, long)
	if err := idle.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	polls := 0
	if err := idle.UnregisterAllWhile(ctx, func() bool { polls++; return polls < 4 }); err != nil {
		t.Fatal(err)
	}
	if polls != 4 {
		t.Errorf("UnregisterAllWhile returned after %d polls of busy, want 4", polls)
	}
	// A master alone: ids/<id> itself is deleted.
	if err := master.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := master.UnregisterAll(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := master.Exists(ctx, root+"/brokers/ids/0"); ok {
		t.Error("ids/0 left behind by a master without slaves")
	}
}

// TestReloadTopic re-registers a topic whose settings changed (numPartitions
// and acceptSubscribe) and leaves an unchanged one alone.
func TestReloadTopic(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	opts := testOptions(t, root)
	opts.BrokerID = 5
	r := newRegistry(t, opts)
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTopic(ctx, "a", 2, true, true); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTopic(ctx, "a", 4, true, false); err != nil {
		t.Fatal(err)
	}
	checkNode(t, r, vectorNode{root + "/brokers/topics/a/5-m", "E", "4"})
	checkNode(t, r, vectorNode{root + "/brokers/topics-pub/a/5-m", "E", `{"numParts":4,"broker":"5-m"}`})
	if ok, _, _ := r.Exists(ctx, root+"/brokers/topics-sub/a/5-m"); ok {
		t.Error("topics-sub node kept after acceptSubscribe became false")
	}
	_, before, _ := r.Get(ctx, root+"/brokers/topics/a/5-m")
	if err := r.RegisterTopic(ctx, "a", 4, true, false); err != nil {
		t.Fatal(err)
	}
	_, after, _ := r.Get(ctx, root+"/brokers/topics/a/5-m")
	if before.Version != after.Version {
		t.Error("unchanged topic was rewritten")
	}
	if err := r.SetConfigChecksum(ctx, 4138223325); err != nil {
		t.Fatal(err)
	}
	checkNode(t, r, vectorNode{root + "/brokers/ids/5/master_config_checksum", "E", "4138223325"})
}

// TestMasterNodeHeld: a second live broker with the same id is refused after
// the wait; a crashed one's node is taken over once its session expires.
func TestMasterNodeHeld(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()

	tap := &zktest.Tap{}
	first := testOptions(t, root)
	first.SessionTimeout = 2 * time.Second
	first.Dialer = tap.Dial
	a := newRegistry(t, first)
	if err := a.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}

	second := testOptions(t, root)
	second.SessionTimeout = 2 * time.Second
	b := newRegistry(t, second)
	err := b.RegisterBroker(ctx)
	if !errors.Is(err, ErrBrokerNodeHeld) {
		t.Fatalf("RegisterBroker with the node held by a live session: %v, want ErrBrokerNodeHeld", err)
	}

	// The first broker "crashes": its connection is cut and cannot come back,
	// so its session expires on the server after its timeout (2 s); a new
	// broker with a longer timeout waits for that instead of failing.
	tap.Block()
	third := testOptions(t, root)
	third.SessionTimeout = 6 * time.Second
	c := newRegistry(t, third)
	start := time.Now()
	if err := c.RegisterBroker(ctx); err != nil {
		t.Fatalf("RegisterBroker after the stale session expired: %v", err)
	}
	t.Logf("took over the stale node after %v", time.Since(start))
	_, st, err := c.Get(ctx, root+"/brokers/ids/0/master")
	if err != nil || st.EphemeralOwner != c.SessionID() {
		t.Fatalf("master node owner 0x%x, want 0x%x (%v)", st.EphemeralOwner, c.SessionID(), err)
	}
}

// TestNoServer: New gives up after the connection timeout.
func TestNoServer(t *testing.T) {
	opts := Options{Connect: "127.0.0.1:1", ConnectionTimeout: 300 * time.Millisecond}
	start := time.Now()
	_, err := New(context.Background(), opts)
	if !errors.Is(err, ErrNoSession) {
		t.Fatalf("New without a server: %v, want ErrNoSession", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("New took %v", time.Since(start))
	}
}

// TestWatches: a children watch fires on a change, and Close returns while
// another watch is still armed (its goroutine ends with the session).
func TestWatches(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	r, err := New(ctx, testOptions(t, root))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.EnsurePath(ctx, root+"/w"); err != nil {
		t.Fatal(err)
	}
	kids, w, err := r.ChildrenW(ctx, root+"/w")
	if err != nil || len(kids) != 0 {
		t.Fatalf("ChildrenW = %v %v", kids, err)
	}
	if err := r.CreateEphemeral(ctx, root+"/w/a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w:
	case <-time.After(5 * time.Second):
		t.Fatal("children watch did not fire")
	}
	if err := r.CreateEphemeral(ctx, root+"/w/a", nil); !errors.Is(err, ErrNodeExists) {
		t.Errorf("second CreateEphemeral: %v, want ErrNodeExists", err)
	}
	_, w2, err := r.GetW(ctx, root+"/w/a")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs with an armed watch")
	}
	select {
	case <-w2:
	case <-time.After(5 * time.Second):
		t.Error("armed watch not released by Close")
	}
	if _, _, err := r.Get(ctx, root+"/w/a"); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
}

func TestDeleteTree(t *testing.T) {
	root := testRoot(t)
	r := newRegistry(t, testOptions(t, root))
	ctx := context.Background()
	for _, p := range []string{root + "/a/b/c", root + "/a/d", root + "/e"} {
		if err := r.EnsurePath(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.DeleteTree(ctx, root+"/a"); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := r.Exists(ctx, root+"/a"); err != nil || ok {
		t.Fatalf("%s/a after DeleteTree: exists %v, err %v", root, ok, err)
	}
	if ok, _, err := r.Exists(ctx, root+"/e"); err != nil || !ok {
		t.Fatalf("sibling %s/e: exists %v, err %v", root, ok, err)
	}
	if err := r.DeleteTree(ctx, root+"/missing"); err != nil {
		t.Fatalf("DeleteTree of a missing node: %v", err)
	}
	if err := r.DeleteTree(ctx, root); err != nil {
		t.Fatal(err)
	}
}

// TestOwnStaleNodeReplaced: a broker killed before its session expired
// left its master node; its next process (same data directory, hence the
// same SessionFile, and the same url) replaces the node at once instead of
// waiting for the old session's 30 s timeout. Another broker, whose
// SessionFile does not name that session, still waits and is refused.
func TestOwnStaleNodeReplaced(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	sessions := filepath.Join(t.TempDir(), "data", "zookeeper.session")

	tap := &zktest.Tap{}
	first := testOptions(t, root)
	first.SessionTimeout = 30 * time.Second
	first.SessionFile = sessions
	first.Dialer = tap.Dial
	a := newRegistry(t, first)
	a.SetURL("meta://127.0.0.1:8123")
	if err := a.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	tap.Block() // kill -9: the session lives on in ZooKeeper for 30 s

	second := testOptions(t, root)
	second.SessionTimeout = 30 * time.Second
	second.SessionFile = sessions
	b := newRegistry(t, second)
	b.SetURL("meta://127.0.0.1:8123")
	start := time.Now()
	if err := b.RegisterBroker(ctx); err != nil {
		t.Fatalf("RegisterBroker over our own stale node: %v", err)
	}
	if err := b.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("took %v: waited for the old session instead of replacing its node", took)
	}
	for _, p := range []string{"/brokers/ids/0/master", "/brokers/topics-pub/orders/0-m"} {
		if _, st, err := b.Get(ctx, root+p); err != nil || st.EphemeralOwner != b.SessionID() {
			t.Errorf("%s owner 0x%x, want 0x%x (%v)", p, st.EphemeralOwner, b.SessionID(), err)
		}
	}

	// Another broker with the same id but not this data directory is not
	// taken for the previous process: it waits, then is refused.
	other := testOptions(t, root)
	other.SessionTimeout = time.Second
	other.SessionFile = filepath.Join(t.TempDir(), "zookeeper.session")
	c := newRegistry(t, other)
	c.SetURL("meta://127.0.0.1:8123")
	if err := c.RegisterBroker(ctx); !errors.Is(err, ErrBrokerNodeHeld) {
		t.Fatalf("a broker of another data directory: %v, want ErrBrokerNodeHeld", err)
	}
}
