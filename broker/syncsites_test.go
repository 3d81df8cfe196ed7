package broker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
)

// fakeSites is a SiteReplicator whose waits end when the test says.
type fakeSites struct {
	mu        sync.Mutex
	connected int
	waits     []func(error)
}

func (f *fakeSites) ConnectedSites() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.connected
}

func (f *fakeSites) AwaitDurable(n int, _ time.Duration, done func(error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waits = append(f.waits, done)
}

func (f *fakeSites) pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waits)
}

func (f *fakeSites) release() {
	f.mu.Lock()
	w := f.waits
	f.waits = nil
	f.mu.Unlock()
	for _, done := range w {
		done(nil)
	}
}

const syncSitesINI = `[system]
brokerId=0
numPartitions=1
unflushThreshold=0
unflushInterval=1000
maxSegmentSize=1048576
maxTransferSize=1048576
deletePolicy=delete,168
[zookeeper]
zk.zkEnable=false
[topic=sync]
minSyncSites=1
[topic=plain]
`

// TestSiteSyncRoute: a put to a topic with minSyncSites is answered only
// once the replicator's wait ends, a put to another topic never waits, a
// transaction's commit (StoreValidated) waits too, and `stats sync_sites`
// shows the topic.
func TestSiteSyncRoute(t *testing.T) {
	tb := startBroker(t, parseConfig(t, []byte(syncSitesINI+"dataPath="+t.TempDir()+"\n")), nil)
	sites := &fakeSites{connected: 1}
	tb.SetSiteReplicator(sites)
	c := dial(t, tb.Addr())

	c.sendCmd(putCmd("plain", 0, "async", 1))
	if r := c.result(); r.Code != wire.StatusOK || sites.pending() != 0 {
		t.Fatalf("plain put: %+v, %d waits", r, sites.pending())
	}
	c.sendCmd(putCmd("sync", 0, "waits", 2))
	c.expectSilence(200 * time.Millisecond)
	if sites.pending() != 1 {
		t.Fatalf("%d waits, want 1", sites.pending())
	}
	sites.release()
	if r := c.result(); r.Code != wire.StatusOK || r.Opaque != 2 {
		t.Fatalf("sync put after its sites: %+v", r)
	}

	done := make(chan error, 1)
	go func() {
		_, err := tb.StoreValidated(context.Background(), "sync", 0, []store.Message{{Body: []byte("tx")}})
		done <- err
	}()
	for sites.pending() == 0 {
		select {
		case err := <-done:
			t.Fatalf("commit answered before its sites: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	sites.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	sites.mu.Lock()
	sites.connected = 0
	sites.mu.Unlock()
	c.sendCmd(putCmd("sync", 0, "refused", 3))
	if r := c.result(); r.Code != wire.StatusServiceUnavailable || !strings.Contains(string(r.Body), "minSyncSites") {
		t.Fatalf("put without sites: %d %s", r.Code, r.Body)
	}
	if s := tb.Stats("sync_sites"); !strings.Contains(s, "connected_sites 0\r\n") || !strings.Contains(s, "sync min_sync_sites 1 degrade refuse degraded false degraded_puts 0 refused_puts 1") {
		t.Fatalf("stats sync_sites:\n%s", s)
	}

	// A reload (what a configsync push ends in) makes "plain" synchronous
	// and degradable: with no site it is acknowledged, degraded.
	cfg := parseConfig(t, []byte(syncSitesINI+"minSyncSites=1\nsyncDegrade=async\ndataPath="+tb.dir+"\n"))
	if _, err := tb.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	c.sendCmd(putCmd("plain", 0, "degraded", 4))
	if r := c.result(); r.Code != wire.StatusOK {
		t.Fatalf("degraded put after the reload: %d %s", r.Code, r.Body)
	}
	if s := tb.Stats("sync_sites"); !strings.Contains(s, "plain min_sync_sites 1 degrade async degraded true degraded_puts 1") {
		t.Fatalf("stats sync_sites after the reload:\n%s", s)
	}
}

// TestSyncTopicDoesNotHoldOtherAnswers: puts to a topic with minSyncSites
// and to an ordinary topic that arrive in one read (a Java producer sends
// every topic over its one connection to the broker) are not answered
// together: the ordinary one is answered after its local group commit,
// without waiting a WAN round trip for the other's slave sites.
func TestSyncTopicDoesNotHoldOtherAnswers(t *testing.T) {
	tb := startBroker(t, parseConfig(t, []byte(syncSitesINI+"dataPath="+t.TempDir()+"\n")), nil)
	sites := &fakeSites{connected: 1}
	tb.SetSiteReplicator(sites)
	c := dial(t, tb.Addr())
	c.sendCmd(putCmd("plain", 0, "warm", 1)) // topics registered, connection set up
	c.sendCmd(putCmd("sync", 0, "warm", 2))
	c.result()
	for sites.pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	sites.release()
	c.result()

	var both []byte
	both = putCmd("sync", 0, "waits", 3).AppendTo(both)
	both = putCmd("plain", 0, "goes", 4).AppendTo(both)
	c.send(both)
	if r := c.result(); r.Code != wire.StatusOK || r.Opaque != 4 {
		t.Fatalf("first answer: %+v, want the plain put's (opaque 4) while the sync put waits", r)
	}
	if sites.pending() != 1 {
		t.Fatalf("%d waits, want the sync put's", sites.pending())
	}
	sites.release()
	if r := c.result(); r.Code != wire.StatusOK || r.Opaque != 3 {
		t.Fatalf("sync put after its sites: %+v", r)
	}
}

// TestCommitIsOneUnit: a transaction's commit over a topic with
// minSyncSites and one without is written as one unit, which the log's
// reader (what replication ships) returns in one piece however small the
// read (each partition's batch alone is larger than it), and is answered
// after one wait for the sites that covers all of it. When the sites go
// away after the commit passed its checks and before it reaches the store,
// none of it is stored, not the partition of the topic without sites
// either.
func TestCommitIsOneUnit(t *testing.T) {
	tb := startBroker(t, parseConfig(t, []byte(syncSitesINI+"dataPath="+t.TempDir()+"\n")), nil)
	sites := &fakeSites{connected: 1}
	tb.SetSiteReplicator(sites)
	body := []byte(strings.Repeat("c", 40<<10))
	commit := []store.PartitionAppend{
		{Topic: "plain", Partition: 0, Msgs: []store.Message{{Body: body}}},
		{Topic: "sync", Partition: 0, Msgs: []store.Message{{Body: body}}},
	}
	_, start := tb.store.LogBounds()
	type result struct {
		outs []store.AppendOutcome
		err  error
	}
	done := make(chan result, 1)
	go func() {
		outs, err := tb.StoreValidatedGroup(context.Background(), commit)
		done <- result{outs, err}
	}()
	for sites.pending() == 0 {
		select {
		case r := <-done:
			t.Fatalf("commit answered before its sites: %+v %v", r.outs, r.err)
		case <-time.After(time.Millisecond):
		}
	}
	if n := sites.pending(); n != 1 {
		t.Fatalf("the commit waits %d times for its sites, want once", n)
	}
	ents, _, err := tb.store.ReadLog(start, 8<<10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].Topic != "plain" || ents[1].Topic != "sync" {
		var got []string
		for _, e := range ents {
			got = append(got, e.Topic)
		}
		t.Fatalf("a read of the log from the commit's start returns %v: the commit is cut where replication ships it", got)
	}
	sites.release()
	if r := <-done; r.err != nil || len(r.outs) != 2 || r.outs[0].Err != nil || r.outs[1].Err != nil {
		t.Fatalf("commit: %+v %v", r.outs, r.err)
	}

	// The sites leave between the commit's checks and its store.
	plainEnd, syncEnd := partitionEnd(t, tb, "plain", 0), partitionEnd(t, tb, "sync", 0)
	tb.gatePassedHook = func() {
		sites.mu.Lock()
		sites.connected = 0
		sites.mu.Unlock()
	}
	outs, err := tb.StoreValidatedGroup(context.Background(), commit)
	tb.gatePassedHook = nil
	if err != nil || len(outs) != 2 || outs[0].Err == nil || outs[1].Err == nil {
		t.Fatalf("commit whose sites left on its way: %+v %v", outs, err)
	}
	if e0, e1 := partitionEnd(t, tb, "plain", 0), partitionEnd(t, tb, "sync", 0); e0 != plainEnd || e1 != syncEnd {
		t.Fatalf("a commit refused for its sites was stored in part: ends %d %d, before %d %d", e0, e1, plainEnd, syncEnd)
	}
}

// TestSamsaCommitWithSyncTopic: on a samsa master (a store step that
// stores units but takes no groups), a commit with a partition of a topic
// with minSyncSites goes partition by partition, each through the site
// wait (siteSyncStore.storeEach), and is answered once, after the last
// wait ended, with an outcome per partition in order; a commit of topics
// without minSyncSites takes no wait. Both are at the samsa slave.
func TestSamsaCommitWithSyncTopic(t *testing.T) {
	cfg := parseConfig(t, []byte(syncSitesINI+"dataPath="+t.TempDir()+"\n"))
	slave := startBroker(t, parseConfig(t, []byte(syncSitesINI+"dataPath="+t.TempDir()+"\n")), func(o *Options) { o.SyncReceiver = true })
	master := startBroker(t, cfg, func(o *Options) {
		o.SyncSlave = slave.Addr().String()
		o.SyncTimeout = 5 * time.Second
	})
	sites := &fakeSites{connected: 1}
	master.SetSiteReplicator(sites)
	commit := func(appends []store.PartitionAppend) chan []store.AppendOutcome {
		done := make(chan []store.AppendOutcome, 1)
		go func() {
			outs, err := master.StoreValidatedGroup(context.Background(), appends)
			if err != nil {
				t.Errorf("commit: %v", err)
			}
			done <- outs
		}()
		return done
	}
	plain := commit([]store.PartitionAppend{
		{Topic: "plain", Partition: 0, Msgs: []store.Message{{Body: []byte("p-a")}}},
		{Topic: "plain", Partition: 0, Msgs: []store.Message{{Body: []byte("p-b")}}},
	})
	if outs := <-plain; len(outs) != 2 || outs[0].Err != nil || outs[1].Err != nil || sites.pending() != 0 {
		t.Fatalf("commit without a synchronous topic: %+v, %d site waits", outs, sites.pending())
	}
	mixed := commit([]store.PartitionAppend{
		{Topic: "plain", Partition: 0, Msgs: []store.Message{{Body: []byte("m-a")}, {Body: []byte("m-b")}}},
		{Topic: "sync", Partition: 0, Msgs: []store.Message{{Body: []byte("m-c")}}},
	})
	for sites.pending() == 0 {
		select {
		case outs := <-mixed:
			t.Fatalf("commit with a synchronous topic answered before its sites: %+v", outs)
		case <-time.After(time.Millisecond):
		}
	}
	sites.release()
	outs := <-mixed
	if len(outs) != 2 || outs[0].Err != nil || outs[1].Err != nil || len(outs[0].Appended) != 2 || len(outs[1].Appended) != 1 {
		t.Fatalf("commit with a synchronous topic: %+v", outs)
	}
	for _, topic := range []string{"plain", "sync"} {
		mp, merr := master.store.Partition(topic, 0)
		sp, serr := slave.store.Partition(topic, 0)
		if merr != nil || serr != nil || mp.Max == 0 || mp.Max != sp.Max {
			t.Fatalf("%s-0: master %+v %v, slave %+v %v: want the same records at both", topic, mp, merr, sp, serr)
		}
	}
}
