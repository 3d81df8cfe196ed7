package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestMirrorCopiesMasterRegistration: Mirror writes a master's registration
// (read with Registration) into another root, as another site's ensemble
// holds it, with the replication address and the generation; it follows
// topic changes, never lowers the generation, re-writes the replication
// address after a session expiry, and removes only its own nodes when the
// master is gone.
func TestMirrorCopiesMasterRegistration(t *testing.T) {
	root, other := testRoot(t), testRoot(t)
	cleanupRoot(t, root)
	cleanupRoot(t, other)
	ctx := context.Background()
	srcOpts := testOptions(t, root)
	srcOpts.ConfigChecksum = 42
	src := newRegistry(t, srcOpts)
	if err := src.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	if err := src.RegisterTopic(ctx, "audit", 1, true, false); err != nil {
		t.Fatal(err)
	}
	reg := src.Registration()
	if !reg.Master() || reg.URL != "meta://127.0.0.1:8123" || reg.Checksum != 42 || len(reg.Topics) != 2 ||
		reg.Topics["audit"] != (TopicRegistration{NumPartitions: 1, AcceptPublish: true}) {
		t.Fatalf("Registration() = %+v", reg)
	}

	tap := &zktest.Tap{}
	mOpts := testOptions(t, other)
	mOpts.Port, mOpts.Dialer = 0, tap.Dial
	mirror := newRegistry(t, mOpts)
	obs := newRegistry(t, testOptions(t, other))
	m := MasterMirror{Registration: reg, ReplicationAddr: "127.0.0.1:8124", Generation: 3}
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	want := func(nodes map[string]string, absent ...string) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
			for p, v := range nodes {
				data, _, err := obs.Get(ctx, other+p)
				if err != nil || string(data) != v {
					return fmt.Errorf("%s = %q %v, want %q", p, data, err, v)
				}
			}
			for _, p := range absent {
				if ok, _, err := obs.Exists(ctx, other+p); err != nil || ok {
					return fmt.Errorf("%s exists (%v)", p, err)
				}
			}
			return nil
		})
	}
	want(map[string]string{
		"/brokers/ids/0":                        "meta://127.0.0.1:8123",
		"/brokers/ids/0/master":                 "meta://127.0.0.1:8123",
		"/brokers/ids/0/master_config_checksum": "42",
		"/brokers/ids/0/replication":            "127.0.0.1:8124",
		"/brokers/ids/0/generation":             "3",
		"/brokers/topics/orders/0-m":            "2",
		"/brokers/topics-pub/orders/0-m":        TopicJSON(2, "0-m"),
		"/brokers/topics-sub/orders/0-m":        TopicJSON(2, "0-m"),
		"/brokers/topics-pub/audit/0-m":         TopicJSON(1, "0-m"),
	}, "/brokers/topics-sub/audit/0-m")

	// A topic changes, another goes; a newer generation written elsewhere
	// stays.
	if err := src.RegisterTopic(ctx, "orders", 4, true, true); err != nil {
		t.Fatal(err)
	}
	if err := src.UnregisterTopic(ctx, "audit"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := obs.RaiseGenerationToBy(ctx, 0, 5, Raiser{Site: "gz"}, false); err != nil {
		t.Fatal(err)
	}
	m.Registration = src.Registration()
	// A master of an older generation than the ensemble's is superseded:
	// it writes nothing (the generation is never lowered either).
	if err := mirror.Mirror(ctx, m); !errors.Is(err, ErrNotCurrentMaster) {
		t.Fatalf("Mirror of generation %d into an ensemble of generation 5: %v", m.Generation, err)
	}
	m.Generation = 5
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	want(map[string]string{"/brokers/topics-pub/orders/0-m": TopicJSON(4, "0-m"), "/brokers/ids/0/generation": "5"},
		"/brokers/topics-pub/audit/0-m", "/brokers/topics/audit/0-m")

	// After a session expiry the registry writes the master's nodes again
	// and the next Mirror the replication address.
	session, passwd := tap.Credentials()
	if err := zktest.ExpireSession(mOpts.Connect, session, passwd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		if mirror.SessionID() == session || !mirror.Connected() {
			return errors.New("no new session yet")
		}
		return mirror.Mirror(ctx, m)
	})
	want(map[string]string{"/brokers/ids/0/master": "meta://127.0.0.1:8123", "/brokers/ids/0/replication": "127.0.0.1:8124",
		"/brokers/topics-sub/orders/0-m": TopicJSON(4, "0-m")})
	if _, st, err := obs.Get(ctx, other+"/brokers/ids/0/replication"); err != nil || st.EphemeralOwner != mirror.SessionID() {
		t.Fatalf("replication node owner 0x%x %v, want the new session 0x%x", st.EphemeralOwner, err, mirror.SessionID())
	}

	// The master is gone (demoted): its nodes go, the generation stays.
	m.Broker = false
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	want(map[string]string{"/brokers/ids/0/generation": "5"},
		"/brokers/ids/0/master", "/brokers/ids/0/replication", "/brokers/ids/0/master_config_checksum",
		"/brokers/topics-pub/orders/0-m", "/brokers/topics-sub/orders/0-m", "/brokers/topics/orders/0-m")
}

// TestMirrorWaitsForTheMasterNode: a mirror does not take a master node
// another session holds (the old master's, until it steps down) and takes
// it once that session lets go; removing the mirror of a master that never
// got the node removes the replication address it published ahead and
// leaves the other master's nodes alone.
func TestMirrorWaitsForTheMasterNode(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	oldOpts := testOptions(t, root)
	oldOpts.Port = 9000
	old := newRegistry(t, oldOpts)
	if err := old.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	mOpts := testOptions(t, root)
	mOpts.Port = 0
	mirror := newRegistry(t, mOpts)
	m := MasterMirror{Registration: Registration{BrokerID: 0, SlaveID: -1, Broker: true, URL: "meta://127.0.0.1:8123",
		Topics: map[string]TopicRegistration{"orders": {NumPartitions: 1, AcceptPublish: true, AcceptSubscribe: true}}},
		ReplicationAddr: "127.0.0.1:8124", Generation: 1}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err := mirror.Mirror(short, m)
	cancel()
	if err == nil {
		t.Fatal("Mirror took the master node another live session holds")
	}
	repl := root + "/brokers/ids/0/replication"
	if data, _, err := mirror.Get(ctx, repl); err != nil || string(data) != "127.0.0.1:8124" {
		t.Fatalf("replication = %q %v, want the address published ahead of the master node", data, err)
	}
	// Removing that mirror keeps the other master's nodes.
	if err := mirror.Mirror(ctx, MasterMirror{Registration: Registration{BrokerID: 0, SlaveID: -1}}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := mirror.Exists(ctx, repl); err != nil || ok {
		t.Fatalf("the replication address published ahead outlived the mirror's removal (%v)", err)
	}
	if data, _, err := mirror.Get(ctx, root+"/brokers/ids/0/master"); err != nil || string(data) != "meta://127.0.0.1:9000" {
		t.Fatalf("master = %q %v after removing a mirror that never held it, want the other master's", data, err)
	}
	if err := old.CreateEphemeral(ctx, repl, []byte("127.0.0.1:9001")); err != nil {
		t.Fatal(err)
	}
	// The old master leaves: the mirror takes over, replication address
	// included.
	done := make(chan error, 1)
	go func() { done <- mirror.Mirror(ctx, m) }()
	time.Sleep(200 * time.Millisecond)
	old.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for p, v := range map[string]string{"/brokers/ids/0/master": "meta://127.0.0.1:8123", "/brokers/ids/0/replication": "127.0.0.1:8124",
		"/brokers/topics-pub/orders/0-m": TopicJSON(1, "0-m"), "/brokers/ids/0/generation": "1"} {
		if data, _, err := mirror.Get(ctx, root+p); err != nil || string(data) != v {
			t.Fatalf("%s = %q %v, want %q", p, data, err, v)
		}
	}
}

// TestMirrorTakesTheNodeOfASupersededMaster: once this ensemble's
// generation is the mirrored master's (the new master raised it there),
// a master node another live session holds is a superseded master's (a
// killed one whose session has not expired): the mirror takes it at once
// instead of waiting out the session, and the old session's topic entries
// are replaced in the same pass.
func TestMirrorTakesTheNodeOfASupersededMaster(t *testing.T) {
	f := newSupersededMaster(t, 1)
	ctx, root, old, mirror := f.ctx, f.root, f.old, f.mirror
	m := MasterMirror{Registration: f.reg, ReplicationAddr: "127.0.0.1:8124", Generation: 1}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := mirror.Mirror(short, m); err != nil {
		t.Fatalf("Mirror of the generation's master waited for the superseded master's session: %v", err)
	}
	for p, v := range map[string]string{"/brokers/ids/0/master": "meta://127.0.0.1:8123", "/brokers/ids/0/replication": "127.0.0.1:8124",
		"/brokers/topics-pub/orders/0-m": TopicJSON(1, "0-m")} {
		data, st, err := mirror.Get(ctx, root+p)
		if err != nil || string(data) != v {
			t.Fatalf("%s = %q %v, want %q", p, data, err, v)
		}
		if st.EphemeralOwner == old.conn.SessionID() {
			t.Fatalf("%s still belongs to the superseded master's session", p)
		}
	}
}

// TestMirrorRewritesATopicEntryRemovedBehindIt: a topic entry a mirror
// wrote and that went behind its session's back (an older master stepping
// down deleted it: a node replaced in one step has the version the old
// one had, so its delete by version can hit the new one) is written again
// at the next Mirror, as the master node is.
func TestMirrorRewritesATopicEntryRemovedBehindIt(t *testing.T) {
	root, other := testRoot(t), testRoot(t)
	cleanupRoot(t, root)
	cleanupRoot(t, other)
	ctx := context.Background()
	src := newRegistry(t, testOptions(t, root))
	if err := src.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.RegisterTopic(ctx, "orders", 2, true, true); err != nil {
		t.Fatal(err)
	}
	mOpts := testOptions(t, other)
	mOpts.Port = 0
	mirror := newRegistry(t, mOpts)
	obs := newRegistry(t, testOptions(t, other))
	m := MasterMirror{Registration: src.Registration(), ReplicationAddr: "127.0.0.1:8124", Generation: 1}
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	pub := other + "/brokers/topics-pub/orders/0-m"
	if err := obs.Delete(ctx, pub); err != nil {
		t.Fatal(err)
	}
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	data, st, err := obs.Get(ctx, pub)
	if err != nil || string(data) != TopicJSON(2, "0-m") || st.EphemeralOwner != mirror.SessionID() {
		t.Fatalf("%s = %q (owner 0x%x, %v) after the next Mirror, want it written again by the mirror's session", pub, data, st.EphemeralOwner, err)
	}
}

// TestMirrorOfASupersededMasterRegistersNothing: a master whose generation
// is older than this ensemble's (it was paused while another site was
// promoted and has not read the newer generation yet) is refused
// (ErrNotCurrentMaster) and writes no node, instead of waiting for the new
// master's node.
func TestMirrorOfASupersededMasterRegistersNothing(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	mOpts := testOptions(t, root)
	mOpts.Port = 0
	mirror := newRegistry(t, mOpts)
	if _, _, err := mirror.RaiseGenerationToBy(ctx, 0, 1, Raiser{Site: "hf"}, false); err != nil {
		t.Fatal(err)
	}
	m := MasterMirror{Registration: Registration{BrokerID: 0, SlaveID: -1, Broker: true, URL: "meta://127.0.0.1:8123",
		Topics: map[string]TopicRegistration{"orders": {NumPartitions: 1, AcceptPublish: true, AcceptSubscribe: true}}},
		ReplicationAddr: "127.0.0.1:8124", Generation: 0}
	if err := mirror.Mirror(ctx, m); !errors.Is(err, ErrNotCurrentMaster) {
		t.Fatalf("Mirror of a master of generation 0 into an ensemble of generation 1: %v", err)
	}
	for _, p := range []string{"/brokers/ids/0/master", "/brokers/topics-pub/orders/0-m"} {
		if ok, _, err := mirror.Exists(ctx, root+p); err != nil || ok {
			t.Fatalf("%s written by a superseded master (%v)", p, err)
		}
	}
}

// TestMirrorWritesTheGenerationsRaiser: every write of the generation
// carries its raiser. A mirror raises the generation in another site's
// ensemble with the raiser the master's promotion wrote in its own (site
// and token), or, when none is given, with the mirroring site's name; a
// generation written there so far named no raiser.
func TestMirrorWritesTheGenerationsRaiser(t *testing.T) {
	root, other := testRoot(t), testRoot(t)
	cleanupRoot(t, root)
	cleanupRoot(t, other)
	ctx := context.Background()
	src := newRegistry(t, testOptions(t, root))
	if err := src.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	mOpts := testOptions(t, other)
	mOpts.Port, mOpts.Site = 0, "hf"
	mirror := newRegistry(t, mOpts)
	obs := newRegistry(t, testOptions(t, other))

	by := Raiser{Generation: 2, Site: "hf", Token: "the-promotions-token"}
	if err := mirror.Mirror(ctx, MasterMirror{Registration: src.Registration(), Generation: 2, Raiser: by}); err != nil {
		t.Fatal(err)
	}
	if g, got, err := obs.GenerationRaiser(ctx, 0); err != nil || g != 2 || got != by {
		t.Fatalf("after the mirror: generation %d raised by %+v (%v), want 2 raised by %+v", g, got, err, by)
	}
	// No raiser given: the mirroring site is named.
	if err := mirror.Mirror(ctx, MasterMirror{Registration: src.Registration(), Generation: 3}); err != nil {
		t.Fatal(err)
	}
	if g, got, err := obs.GenerationRaiser(ctx, 0); err != nil || g != 3 || got.Site != "hf" {
		t.Fatalf("after the mirror: generation %d raised by %+v (%v), want 3 raised by hf", g, got, err)
	}
}

// TestMirrorLeavesTheOldMastersSlaveEntry: with one ensemble per site, the
// new master's mirror in the ensemble of the site that handed over
// (MasterMirror.LeaveSlave) replaces the old master's topics-pub entry and
// creates the entry of the slave the old master becomes in one multi; the
// old master, becoming that slave, leaves it as it is. The children of
// topics-pub/<topic> change in one step (cversion +3: a delete and two
// creates), not two (before, the old master's slave entry was created on
// its own afterwards, and MetaQ 1.4.6's Java producer dropped its
// connection at each). Mastership moved back, the mirror removed, that
// entry stays: the children change once then too.
func TestMirrorLeavesTheOldMastersSlaveEntry(t *testing.T) {
	f := newSupersededMaster(t, 2)
	ctx, root, old, mirror := f.ctx, f.root, f.old, f.mirror
	pub := root + "/brokers/topics-pub/orders"
	cversion := func() int32 {
		t.Helper()
		_, st, err := old.Get(ctx, pub)
		if err != nil {
			t.Fatal(err)
		}
		return st.Cversion
	}
	before := cversion()
	slaveID := 1
	m := MasterMirror{Registration: f.reg, Generation: 1, LeaveSlave: &slaveID}
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := old.BecomeSlave(ctx, 1); err != nil {
		t.Fatal(err)
	}
	kids, err := old.Children(ctx, pub)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kids)
	if !slices.Equal(kids, []string{"0-m", "0-s1"}) {
		t.Fatalf("topics-pub/orders = %v, want [0-m 0-s1]", kids)
	}
	if n := cversion() - before; n != 3 {
		t.Errorf("topics-pub/orders children changed %d times, want 3 (one multi: a delete and two creates)", n)
	}
	for _, name := range []string{"0-m", "0-s1"} {
		if ok, err := mirror.Owns(ctx, pub+"/"+name); err != nil || !ok {
			t.Errorf("topics-pub/orders/%s is not the mirror's: %v %v", name, ok, err)
		}
	}
	if data, _, err := old.Get(ctx, pub+"/0-s1"); err != nil || string(data) != TopicJSON(2, "0-s1") {
		t.Errorf("topics-pub/orders/0-s1 = %q %v", data, err)
	}
	// A later Mirror changes nothing there.
	mid := cversion()
	if err := mirror.Mirror(ctx, m); err != nil {
		t.Fatal(err)
	}
	if n := cversion() - mid; n != 0 {
		t.Errorf("a second Mirror changed topics-pub/orders' children %d times", n)
	}
	// Back to bj (a switchover back): bj replaces the mirror's master
	// entry in one step, then the mirror is removed; it leaves the slave
	// entry it kept there, where removing it would change the children
	// once more.
	mid = cversion()
	if taken, err := old.TakeMasterNode(ctx, mirror.SessionID()); err != nil || !taken {
		t.Fatalf("TakeMasterNode = %v %v", taken, err)
	}
	if err := old.BecomeMaster(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mirror.Mirror(ctx, MasterMirror{Registration: Registration{BrokerID: 0, SlaveID: -1}}); err != nil {
		t.Fatal(err)
	}
	if n := cversion() - mid; n != 2 {
		t.Errorf("back to bj: topics-pub/orders children changed %d times, want 2 (one delete and one create, in one step)", n)
	}
	if ok, err := old.Owns(ctx, pub+"/0-m"); err != nil || !ok {
		t.Errorf("topics-pub/orders/0-m is not bj's after it took mastership back: %v %v", ok, err)
	}
}

// supersededMaster is the set-up shared by the mirror tests in which a new
// master's mirror replaces an old one in one ensemble: the old master
// (port 9000) registered as broker 0 with topic orders, and a mirror
// session in the same ensemble whose generation hf raised to 1.
type supersededMaster struct {
	ctx         context.Context
	root        string
	old, mirror *Registry
	// reg is the new master's registration (MetaQ port 8123, orders with
	// the old master's partitions), for a MasterMirror.
	reg Registration
}

// newSupersededMaster builds a supersededMaster whose topic orders has
// partitions partitions. The old master's session outlives the test, as a
// killed master's does until it expires.
func newSupersededMaster(t *testing.T, partitions int) supersededMaster {
	t.Helper()
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	oldOpts := testOptions(t, root)
	oldOpts.Port = 9000
	oldOpts.SessionTimeout = 30 * time.Second // longer than the tests wait
	old := newRegistry(t, oldOpts)
	if err := old.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := old.RegisterTopic(ctx, "orders", partitions, true, true); err != nil {
		t.Fatal(err)
	}
	mOpts := testOptions(t, root)
	mOpts.Port = 0
	mirror := newRegistry(t, mOpts)
	if _, _, err := mirror.RaiseGenerationToBy(ctx, 0, 1, Raiser{Site: "hf"}, false); err != nil {
		t.Fatal(err)
	}
	reg := Registration{BrokerID: 0, SlaveID: -1, Broker: true, URL: "meta://127.0.0.1:8123",
		Topics: map[string]TopicRegistration{"orders": {NumPartitions: partitions, AcceptPublish: true, AcceptSubscribe: true}}}
	return supersededMaster{ctx: ctx, root: root, old: old, mirror: mirror, reg: reg}
}

// TestMirrorNeverTakesTheNodeOfAnotherSitesGeneration: a master node held
// by another session in an ensemble whose generation is the mirrored one
// is taken only when that generation is this site's (its raiser names this
// site). A master that stepped down for another site's promotion, and
// mirrored itself with that generation before its demotion registered it
// as a slave, took the new master's node: clients of that ensemble were
// sent to a broker that refused their puts. It is refused
// (ErrNotCurrentMaster) whether it names the generation's raiser itself
// or not, and the holder keeps its node.
func TestMirrorNeverTakesTheNodeOfAnotherSitesGeneration(t *testing.T) {
	f := newSupersededMaster(t, 1) // generation 1 raised by hf; old holds the node
	ctx, root, old := f.ctx, f.root, f.old
	mOpts := testOptions(t, root)
	mOpts.Port, mOpts.Site = 0, "gz"
	gz := newRegistry(t, mOpts)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for _, by := range []Raiser{{Generation: 1, Site: "hf"}, {}} {
		m := MasterMirror{Registration: f.reg, ReplicationAddr: "127.0.0.1:8124", Generation: 1, Raiser: by}
		if err := gz.Mirror(short, m); !errors.Is(err, ErrNotCurrentMaster) {
			t.Fatalf("Mirror by site gz of hf's generation 1 (raiser given %+v): %v, want ErrNotCurrentMaster", by, err)
		}
		data, st, err := gz.Get(ctx, root+"/brokers/ids/0/master")
		if err != nil || st.EphemeralOwner != old.conn.SessionID() || string(data) != "meta://127.0.0.1:9000" {
			t.Fatalf("master node = %q (owner 0x%x, %v) after gz's mirror (raiser given %+v), want hf's master's", data, st.EphemeralOwner, err, by)
		}
	}
	// The generation's own site takes it.
	hOpts := testOptions(t, root)
	hOpts.Port, hOpts.Site = 0, "hf"
	hf := newRegistry(t, hOpts)
	if err := hf.Mirror(short, MasterMirror{Registration: f.reg, Generation: 1, Raiser: Raiser{Generation: 1, Site: "hf"}}); err != nil {
		t.Fatalf("Mirror by site hf of its own generation 1: %v", err)
	}
	if _, st, err := hf.Get(ctx, root+"/brokers/ids/0/master"); err != nil || st.EphemeralOwner != hf.SessionID() {
		t.Fatalf("master node owner 0x%x (%v) after hf's mirror, want hf's mirror session", st.EphemeralOwner, err)
	}
}
