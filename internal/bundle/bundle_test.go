package bundle

import (
	"context"
	"encoding/json"
	"hash/crc32"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/registry"
	"metaq/internal/testutil"
	"metaq/internal/unixsock"
)

// The registry is the broker's ZooKeeper registry as it is, no adapter.
var _ broker.Registry = (*registry.Registry)(nil)

func checkZNode(t *testing.T, zk *registry.Registry, path, want string) {
	t.Helper()
	data, st, err := zk.Get(context.Background(), path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if string(data) != want {
		t.Errorf("%s = %q, want %q", path, data, want)
	}
	if st.EphemeralOwner == 0 {
		t.Errorf("%s is persistent, want ephemeral", path)
	}
}

// TestReloadRegistersTopics: a reload accepts a new topic at once, registers
// it and a changed one in ZooKeeper, and rewrites master_config_checksum.
func TestReloadRegistersTopics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=2\n")
	ctx := context.Background()
	b := e.start(t)
	zk := zkClient(t, e)
	p := zk.Paths()
	checkZNode(t, zk, p.Broker(0, -1), "meta://127.0.0.1:"+strconv.Itoa(e.port))
	checkZNode(t, zk, p.Topics()+"/e2e/0-m", "2")
	checkZNode(t, zk, p.TopicsSub()+"/e2e/0-m", `{"numParts":2,"broker":"0-m"}`)
	raw, _ := os.ReadFile(e.ini)
	checkZNode(t, zk, p.MasterConfigChecksum(0), strconv.FormatUint(uint64(crc32.ChecksumIEEE(raw)), 10))

	e.writeINI(t, "[topic=e2e]\nnumPartitions=3\n\n[topic=fresh]\nnumPartitions=5\nacceptSubscribe=false\n")
	changes, err := b.Reload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(changes.TopicsAdded, []string{"fresh"}) || !slices.Equal(changes.TopicsChanged, []string{"e2e"}) {
		t.Errorf("changes = %+v", changes)
	}
	checkZNode(t, zk, p.Topics()+"/e2e/0-m", "3")
	checkZNode(t, zk, p.TopicsPub()+"/e2e/0-m", `{"numParts":3,"broker":"0-m"}`)
	checkZNode(t, zk, p.TopicsPub()+"/fresh/0-m", `{"numParts":5,"broker":"0-m"}`)
	checkZNode(t, zk, p.Topics()+"/fresh/0-m", "5")
	if ok, _, _ := zk.Exists(ctx, p.TopicsSub()+"/fresh/0-m"); ok {
		t.Error("topics-sub/fresh registered although acceptSubscribe=false")
	}
	raw, _ = os.ReadFile(e.ini)
	checkZNode(t, zk, p.MasterConfigChecksum(0), strconv.FormatUint(uint64(crc32.ChecksumIEEE(raw)), 10))

	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, _, err := mc.put("fresh", 4, []byte("new topic")); err != nil {
		t.Errorf("put to a topic added by reload: %v", err)
	}
	if _, _, err := mc.put("e2e", 2, []byte("new partition")); err != nil {
		t.Errorf("put to a partition added by reload: %v", err)
	}

	// A file that does not load changes nothing.
	os.WriteFile(e.ini, []byte("[system]\nbogus=1\n"), 0o644)
	if _, err := b.Reload(ctx); err == nil {
		t.Error("reload of a broken file succeeded")
	}
	checkZNode(t, zk, p.Topics()+"/fresh/0-m", "5")
}

func adminDo(t *testing.T, b *Bundle, method, path, token string) (int, string) {
	t.Helper()
	code, body := testutil.HTTPDo(t, method, "http://"+b.AdminAddr()+path, token)
	return code, string(body)
}

// TestAdminEndpoint drives status, stats, close/open-partitions and
// slave-status, and checks that partition closing reaches the protocol.
func TestAdminEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=2\n")
	b := e.start(t)

	code, body := adminDo(t, b, "GET", "/status", "")
	if code != 200 {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.PID != os.Getpid() || st.Mode != "master" || st.ZooKeeper == nil || !st.ZooKeeper.BrokerRegistered ||
		!slices.Contains(st.ZooKeeper.Topics, "e2e") || !st.Healthy {
		t.Errorf("status = %+v", st)
	}

	if code, body := adminDo(t, b, "GET", "/stats?item=help", ""); code != 200 || !strings.Contains(body, "config Returns broker's config file content.") {
		t.Errorf("/stats help: %d %q", code, body)
	}

	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if code, body := adminDo(t, b, "POST", "/close-partitions?topic=e2e&start=1&end=1", ""); code != 200 {
		t.Fatalf("close-partitions: %d %s", code, body)
	}
	rep, err := mc.roundTrip("put e2e 1 1 0 -1", []byte("x"))
	if err != nil || rep.code != 403 {
		t.Errorf("put to a closed partition: %v %d %s", err, rep.code, rep.body)
	}
	if _, _, err := mc.put("e2e", 0, []byte("x")); err != nil {
		t.Errorf("put to an open partition: %v", err)
	}
	if code, _ := adminDo(t, b, "POST", "/close-partitions?topic=e2e", ""); code != 400 {
		t.Errorf("close-partitions without a range: %d, want 400", code)
	}
	if code, body := adminDo(t, b, "POST", "/open-partitions?topic=e2e", ""); code != 200 {
		t.Fatalf("open-partitions: %d %s", code, body)
	}
	if _, _, err := mc.put("e2e", 1, []byte("x")); err != nil {
		t.Errorf("put after open-partitions: %v", err)
	}
	if code, _ := adminDo(t, b, "GET", "/slave-status", ""); code != 404 {
		t.Errorf("/slave-status on a master: %d, want 404", code)
	}
}

// TestAdminToken: with a [site] token every request needs it.
// TestAdminRefusalsSayWhatIsWrong: what an operator mistypes is answered
// 404 or 409 naming what is wrong, not 500, and changes nothing.
func TestAdminRefusalsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=2\n")
	b := e.start(t)
	for _, c := range []struct {
		method, path string
		code         int
		want         string
	}{
		{"POST", "/close-partitions?topic=nosuch&start=0&end=1", 404, `no topic "nosuch"`},
		{"POST", "/close-partitions?topic=e2e&start=0&end=2000000000", 404, "e2e has partitions 0..1"},
		{"POST", "/repair?topic=e2e&partition=9&from=127.0.0.1:1", 404, "e2e-9: no such partition here"},
		{"POST", "/repair?topic=e2e&partition=1&from=127.0.0.1:1", 200, "e2e-1 has no damaged range"},
		{"POST", "/promote", 409, "this site is already master"},
		{"POST", "/switchover?to=nosite", 404, `no slave of this master is named "nosite"`},
	} {
		code, body := adminDo(t, b, c.method, c.path, "")
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s: %d %q, want %d with %q", c.method, c.path, code, body, c.code, c.want)
		}
	}
	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if rep, err := mc.roundTrip("put e2e 1 1 0 -1", []byte("x")); err != nil || rep.code != 200 {
		t.Fatalf("put after the refused closes: %+v %v, want 200", rep, err)
	}
}

func TestAdminToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=1\n\n[site]\ntoken=s3cret\n")
	b := e.start(t)
	if code, _ := adminDo(t, b, "GET", "/status", ""); code != 401 {
		t.Errorf("without token: %d, want 401", code)
	}
	if code, _ := adminDo(t, b, "GET", "/status", "wrong"); code != 401 {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, _ := adminDo(t, b, "GET", "/status", "s3cret"); code != 200 {
		t.Errorf("right token: %d, want 200", code)
	}
	// The unix socket in the data directory serves the same endpoint, with
	// the same rule.
	if got, want := b.AdminSocket(), filepath.Join(b.Config().System.DataPath, "admin.sock"); got != want {
		t.Fatalf("admin socket %q, want %q", got, want)
	}
	sock := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return unixsock.Dial(ctx, b.AdminSocket(), 5*time.Second)
	}}}
	for token, want := range map[string]int{"": 401, "s3cret": 200} {
		req, _ := http.NewRequest("GET", "http://admin/status", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := sock.Do(req)
		if err != nil {
			t.Fatalf("admin socket: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("admin socket, token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}

// TestStandalone: zk.zkEnable=false runs without ZooKeeper.
func TestStandalone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=1\n")
	raw, _ := os.ReadFile(e.ini)
	ini := strings.Replace(string(raw), "zk.zkConnect="+e.zk, "zk.zkConnect=127.0.0.1:1\nzk.zkEnable=false", 1)
	os.WriteFile(e.ini, []byte(ini), 0o644)
	b := e.start(t)
	if b.Registry != nil {
		t.Fatal("registry created with zk.zkEnable=false")
	}
	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, _, err := mc.put("e2e", 0, []byte("alone")); err != nil {
		t.Fatal(err)
	}
	if st := b.Status(); st.ZooKeeper != nil {
		t.Errorf("status reports ZooKeeper: %+v", st.ZooKeeper)
	}
}
