package registry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestPromotionsOfALostSiteNameNoSupersededMaster: a whole site is lost
// (the masters of brokerIds 1 and 2 killed, their sessions alive until
// they expire) and both brokerIds are promoted elsewhere, their new
// masters registering in the lost site's ensemble one after the other. A
// client that reads the topic's masters on every change of topics-pub's
// children, as MetaQ 1.4.6's Java producer does (and waits 10 s for each
// master that does not answer), must never find, after the first change
// the promotions made, an <id>-m entry whose master node names a killed
// master. On the code before, brokerId 1's registration changed the
// children while ids/2/master still named the killed master of 2.
//
// The new masters register through a mirror (another site's master in this
// ensemble), or take over the killed master's nodes in one multi
// (BecomeMasterFrom with the killed master's session: a promotion that
// fences a dead master's session, or a switchover), which left the
// superseded master of the other brokerId listed on the code before.
func TestPromotionsOfALostSiteNameNoSupersededMaster(t *testing.T) {
	for _, how := range []string{"mirror", "takeover"} {
		t.Run(how, func(t *testing.T) { testPromotionsOfALostSite(t, how == "takeover") })
	}
}

func testPromotionsOfALostSite(t *testing.T, takeover bool) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	const topic = "orders"
	dead := map[string]bool{}
	deadSession := map[int]int64{}
	for id := 1; id <= 2; id++ {
		tap := &zktest.Tap{}
		o := testOptions(t, root)
		o.SessionTimeout, o.BrokerID, o.Port, o.Dialer = 30*time.Second, id, 8100+id, tap.Dial
		old, url := registerWithTopic(t, o, topic)
		t.Cleanup(tap.Unblock) // before Close
		deadSession[id] = old.SessionID()
		tap.Block() // killed: the session and its nodes stay
		dead[url] = true
	}
	// With takeover, the new masters are slaves of this ensemble first,
	// registered before the client starts reading.
	slaves := map[int]*Registry{}
	news := map[string]bool{}
	for id := 1; id <= 2 && takeover; id++ {
		o := testOptions(t, root)
		o.BrokerID, o.Port, o.Slave, o.SlaveID = id, 8200+id, true, 1
		r, url := registerWithTopic(t, o, topic)
		slaves[id], news[url] = r, true
	}

	// The client: on every change, the masters of the listed <id>-m.
	watcher := newRegistry(t, testOptions(t, root))
	type listing struct {
		cversion int32
		masters  map[string]string
	}
	var (
		mu       sync.Mutex
		listings []listing
	)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		dir := root + "/brokers/topics-pub/" + topic
		for wctx.Err() == nil {
			kids, w, err := watcher.ChildrenW(wctx, dir)
			if err != nil {
				return
			}
			_, st, _ := watcher.Get(wctx, dir)
			l := listing{cversion: st.Cversion, masters: map[string]string{}}
			for _, k := range kids {
				id, slave, ok := ParseBrokerString(k)
				if !ok || slave >= 0 {
					continue
				}
				data, _, err := watcher.Get(wctx, fmt.Sprintf("%s/brokers/ids/%d/master", root, id))
				if err == nil {
					l.masters[k] = string(data)
				}
			}
			mu.Lock()
			listings = append(listings, l)
			mu.Unlock()
			select {
			case <-w:
			case <-wctx.Done():
			}
		}
	}()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(listings) == 0 {
			return fmt.Errorf("no listing read yet")
		}
		return nil
	})

	// Both brokerIds promoted elsewhere: generations raised first (the
	// promotions' raises), then each new master registers, one after the
	// other (their mirrors in this ensemble).
	for id := 1; id <= 2; id++ {
		if _, err := watcher.RaiseGeneration(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
	}
	for id := 1; id <= 2 && takeover; id++ {
		if err := slaves[id].BecomeMasterFrom(ctx, deadSession[id]); err != nil {
			t.Fatalf("takeover by the new master of %d: %v", id, err)
		}
	}
	for id := 1; id <= 2 && !takeover; id++ {
		_, url := mirrorNewMaster(t, root, id, topic)
		news[url] = true
	}
	want := func(l listing) bool {
		if len(l.masters) != 2 {
			return false
		}
		for _, u := range l.masters {
			if !news[u] {
				return false
			}
		}
		return true
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if l := listings[len(listings)-1]; !want(l) {
			return fmt.Errorf("the listing is %v, want both new masters", l.masters)
		}
		return nil
	})
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	var seen []string
	for i, l := range listings {
		seen = append(seen, fmt.Sprintf("cversion %d: %v", l.cversion, l.masters))
		if i == 0 {
			continue // before the promotions
		}
		for k, u := range l.masters {
			if dead[u] {
				t.Errorf("after a promotion changed the topic's publishers, %s names the killed master %s: a Java producer waits 10 s for it", k, u)
			}
		}
	}
	t.Logf("listings:\n%s", strings.Join(seen, "\n"))
}

// TestCurrentSiblingMasterStaysListed: the rule above leaves out only a
// master registered before its brokerId's generation was raised. A
// sibling master registered at its current generation (after the raise),
// or one whose generation was never raised, keeps its entry when another
// brokerId's master changes.
func TestCurrentSiblingMasterStaysListed(t *testing.T) {
	root := testRoot(t)
	cleanupRoot(t, root)
	ctx := context.Background()
	const topic = "orders"
	admin := newRegistry(t, testOptions(t, root))
	// brokerId 2 was promoted before: its master registered after the raise.
	if _, err := admin.RaiseGeneration(ctx, 2, 0); err != nil {
		t.Fatal(err)
	}
	entries := map[int]Stat{}
	for id := 1; id <= 3; id++ {
		tap := &zktest.Tap{}
		o := testOptions(t, root)
		o.SessionTimeout, o.BrokerID, o.Port, o.Dialer = 30*time.Second, id, 8100+id, tap.Dial
		registerWithTopic(t, o, topic)
		t.Cleanup(tap.Unblock)
		if id == 1 {
			tap.Block() // brokerId 1's master is killed and promoted elsewhere
		}
		_, st, err := admin.Get(ctx, fmt.Sprintf("%s/brokers/topics-pub/%s/%d-m", root, topic, id))
		if err != nil {
			t.Fatal(err)
		}
		entries[id] = st
	}
	if _, err := admin.RaiseGeneration(ctx, 1, 0); err != nil {
		t.Fatal(err)
	}
	nm, _ := mirrorNewMaster(t, root, 1, topic)
	for id := 2; id <= 3; id++ {
		_, st, err := admin.Get(ctx, fmt.Sprintf("%s/brokers/topics-pub/%s/%d-m", root, topic, id))
		if err != nil || st.Czxid != entries[id].Czxid {
			t.Errorf("brokerId %d's entry after brokerId 1's master changed: %+v %v, want it untouched (%+v)", id, st, err, entries[id])
		}
	}
	_, st, err := admin.Get(ctx, fmt.Sprintf("%s/brokers/topics-pub/%s/1-m", root, topic))
	if err != nil || st.EphemeralOwner != nm.SessionID() {
		t.Errorf("brokerId 1's entry: owner 0x%x %v, want the new master's", st.EphemeralOwner, err)
	}
}

// registerWithTopic starts a registry with o and registers its broker, at
// meta://127.0.0.1:<o.Port>, and topic (2 partitions, publish and
// subscribe); it returns the registry and the url.
func registerWithTopic(t *testing.T, o Options, topic string) (*Registry, string) {
	t.Helper()
	ctx := context.Background()
	r := newRegistry(t, o)
	url := fmt.Sprintf("meta://127.0.0.1:%d", o.Port)
	r.SetURL(url)
	if err := r.RegisterBroker(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterTopic(ctx, topic, 2, true, true); err != nil {
		t.Fatal(err)
	}
	return r, url
}

// mirrorNewMaster registers the new master of brokerId id, promoted at
// another site, in root's ensemble through a mirror at generation 1, as
// meta://127.0.0.1:<8200+id> with topic (2 partitions); it returns the
// mirroring registry and the url.
func mirrorNewMaster(t *testing.T, root string, id int, topic string) (*Registry, string) {
	t.Helper()
	o := testOptions(t, root)
	o.BrokerID, o.Port = id, 8200+id
	nm := newRegistry(t, o)
	url := fmt.Sprintf("meta://127.0.0.1:%d", o.Port)
	err := nm.Mirror(context.Background(), MasterMirror{Registration: Registration{BrokerID: id, SlaveID: -1, Broker: true, URL: url,
		Topics: map[string]TopicRegistration{topic: {NumPartitions: 2, AcceptPublish: true, AcceptSubscribe: true}}}, Generation: 1})
	if err != nil {
		t.Fatalf("mirror of the new master of %d: %v", id, err)
	}
	return nm, url
}
