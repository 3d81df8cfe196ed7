package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"metaq/broker/brokertest"
	"metaq/internal/testutil"
	"metaq/topology"
)

// fakePool serves a /lag document with a master at bj and its slave at hf;
// hf's state is switchable.
type fakePool struct {
	mu       sync.Mutex
	bj, hf   string
	hfHealth bool
}

func (f *fakePool) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	state := topology.LagOK
	if !f.hfHealth {
		state = topology.LagDown
	}
	doc := topology.LagDocument{Node: "bj-0-m", Site: "bj", Members: []topology.Member{
		{Name: "bj-0-m", State: topology.StateAlive, Meta: topology.Meta{Site: "bj", Role: topology.RoleMaster, SlaveID: -1,
			ServeURL: "meta://" + f.bj, Health: topology.Health{StorageOK: true, ReplicationOK: true},
			Lag: []topology.LagSummary{{SlaveGroup: "meta-slave-group-hf", SlaveID: 1, State: state}}}},
		{Name: "hf-0-s1", State: topology.StateAlive, Meta: topology.Meta{Site: "hf", Role: topology.RoleSlave, SlaveID: 1,
			ServeURL: "meta://" + f.hf, Health: topology.Health{StorageOK: true, ReplicationOK: f.hfHealth}}},
	}}
	json.NewEncoder(w).Encode(doc)
}

func (f *fakePool) setHF(ok bool) {
	f.mu.Lock()
	f.hfHealth = ok
	f.mu.Unlock()
}

// TestConsumeAndFetchPinnedToSite: with -site hf -prefer local-first,
// consume and fetch read from hf's replica while the pool shows it healthy,
// and from the master when it is not. The two brokers hold different
// messages, so the output says which one was read.
func TestConsumeAndFetchPinnedToSite(t *testing.T) {
	zk := testutil.ZooKeeper(t)
	root := fmt.Sprintf("/metaq-test-cli-%d", rand.Int64())
	bj := brokertest.Start(t, zk, root, map[string]int{"cli": 1}, nil)
	// hf's broker is registered elsewhere: clients find only bj in ZooKeeper.
	hf := brokertest.Start(t, zk, root+"-hf", map[string]int{"cli": 1}, nil)
	g := []string{"-zk", zk, "-root", root}
	for addr, text := range map[string]string{bj.Addr(): "from-bj\n", hf.Addr(): "from-hf\n"} {
		if _, errs, err := metaq(t, text, "-brokers", addr, "produce", "-topic", "cli"); err != nil {
			t.Fatalf("produce to %s: %v %s", addr, err, errs)
		}
	}
	pool := &fakePool{bj: bj.Addr(), hf: hf.Addr(), hfHealth: true}
	srv := httptest.NewServer(pool)
	defer srv.Close()
	pin := []string{"-site", "hf", "-prefer", "local-first", "-lag", srv.URL}

	read := func(cmd ...string) string {
		t.Helper()
		out, errs, err := metaq(t, "", append(g, cmd...)...)
		if err != nil {
			t.Fatalf("%v: %v %s", cmd, err, errs)
		}
		return out
	}
	fetch := append([]string{"fetch", "-topic", "cli", "-partition", "0-0", "-n", "1"}, pin...)
	if out := read(fetch...); !strings.Contains(out, "from-hf") {
		t.Errorf("fetch pinned to healthy hf read %q", out)
	}
	consume := append([]string{"consume", "-topic", "cli", "-n", "1", "-q", "-ignore-saved"}, pin...)
	if out := read(append(consume, "-group", "g1")...); !strings.Contains(out, "from-hf") {
		t.Errorf("consume pinned to healthy hf read %q", out)
	}
	// The command says at the end where it read.
	_, errs, err := metaq(t, "", append(g, append(consume, "-group", "g1b")...)...)
	if err != nil || !strings.Contains(errs, "reads served by:\n  hf ("+hf.Addr()) || !strings.Contains(errs, "partitions 0-0") {
		t.Errorf("consume pinned to hf: %v, stderr:\n%s", err, errs)
	}
	// -site without -prefer reads from the master: warned, and said at the end.
	out, errs, err := metaq(t, "", append(g, "consume", "-topic", "cli", "-n", "1", "-q", "-ignore-saved", "-group", "g1c", "-site", "hf")...)
	if err != nil || !strings.Contains(out, "from-bj") || !strings.Contains(errs, "-site hf has no effect with -prefer master-only") ||
		!strings.Contains(errs, "reads served by: the master of each partition") {
		t.Errorf("consume -site hf without -prefer: %v, stdout %q, stderr:\n%s", err, out, errs)
	}
	// A site the pool does not know: warned, naming the sites it knows.
	hefei := append([]string{"consume", "-topic", "cli", "-n", "1", "-q", "-ignore-saved", "-group", "g1d"}, "-site", "hefei", "-prefer", "local-first", "-lag", srv.URL)
	_, errs, err = metaq(t, "", append(g, hefei...)...)
	if err != nil || !strings.Contains(errs, `the pool has no site "hefei" (it knows bj (alive), hf (alive))`) || !strings.Contains(errs, "reads served by:\n  bj (") {
		t.Errorf("consume -site hefei: %v, stderr:\n%s", err, errs)
	}

	pool.setHF(false)
	if out := read(fetch...); !strings.Contains(out, "from-bj") {
		t.Errorf("fetch with hf down read %q, want bj's message", out)
	}
	if out := read(append(consume, "-group", "g2")...); !strings.Contains(out, "from-bj") {
		t.Errorf("consume with hf down read %q, want bj's message", out)
	}

	// Without a pool view, local-first is refused instead of silently
	// reading from the master.
	if _, _, err := metaq(t, "", append(g, "fetch", "-topic", "cli", "-site", "hf", "-prefer", "local-first", "-lag", "")...); err == nil ||
		!strings.Contains(err.Error(), "-lag") {
		t.Errorf("local-first without -lag: %v", err)
	}
}
