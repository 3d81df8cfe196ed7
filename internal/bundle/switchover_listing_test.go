package bundle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestSwitchoverListsAMasterThroughout: during `switchover -to hf`,
// ZooKeeper must list a master of orders at every moment (a topics-pub
// entry <id>-m whose ids/<id>/master exists: what MetaQ's Java producer and
// the Go client read), also when bj's ZooKeeper session ends in the middle
// of hf's promotion, as it does when bj was cut off from its ZooKeeper
// before it handed over. A MetaQ 1.4.6 Java producer that reads the
// listing while it names no master fails its sends ("no server
// available"); so does the Go client ("no partition available").
//
// bj's session is ended from outside as soon as hf has taken the master
// node, and many consumer groups hold offsets of bj's brokerId, which hf
// checks against its ends as it registers. On the code before, hf removed
// bj's master node, checked the offsets, then registered node by node:
// ZooKeeper listed no master of orders until it did (seen as 1.4-5.2 s
// in TestSwitchoverPassesHeldPutsOnWithoutZooKeeper on a loaded machine,
// where bj's session ran out on its own).
func TestSwitchoverListsAMasterThroughout(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{})
	bj, hf := s.site("bj"), s.site("hf")
	brokerID := bj.Config().System.BrokerID
	zc := zkClient(t, &testEnv{zk: s.zks["bj"], root: s.zkRoot})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Consumer offsets within bj's log: the promotion only reads them.
	const groups = 300
	for g := range groups {
		if err := zc.CommitOffset(ctx, fmt.Sprintf("listing-g%d", g), "orders", brokerID, g%2, -1, 0); err != nil {
			t.Fatal(err)
		}
	}
	session, passwd := s.tapOf("bj").Credentials()
	if session != bj.Registry.SessionID() {
		t.Fatalf("bj's tap saw session 0x%x, its registry's is 0x%x", session, bj.Registry.SessionID())
	}
	hfURL := hf.Broker.URL()

	w := &listingWatch{zc: zc, topic: "orders"}
	var expired sync.Once
	stop := w.start(ctx, func(masterURL string, ok bool) {
		// hf took bj's master node (removed it, or holds it): bj's
		// session ends now, and with it every node it still holds.
		if !ok || masterURL == hfURL {
			expired.Do(func() {
				if err := zktest.ExpireSession(s.zks["bj"], session, passwd); err != nil {
					t.Errorf("end bj's session: %v", err)
				}
				t.Logf("%s: ended bj's session 0x%x (master node %q, present %t)", time.Now().Format("15:04:05.000"), session, masterURL, ok)
			})
		}
	}, brokerID)
	defer stop()

	rep := s.switchover("bj", "hf")
	testutil.Eventually(t, time.Minute, 20*time.Millisecond, func() error {
		reg := hf.Registry.Registration()
		if !reg.Master() {
			return errors.New("hf has not registered as master yet")
		}
		if url, ok := w.masterURL(); !ok || url != hfURL {
			return fmt.Errorf("ZooKeeper names %q as the master, want hf's %s", url, hfURL)
		}
		return nil
	})
	stop()
	reads, gaps := w.result()
	if len(gaps) > 0 {
		t.Fatalf("during the switchover ZooKeeper listed no master of orders: %s (%d reads)", strings.Join(gaps, "; "), reads)
	}
	t.Logf("switchover to %s: %d reads of the listing, a master in every one", rep.To, reads)
	s.produce("hf", "orders", 5)
	s.converged("orders")
}

// listingWatch reads, again and again, what a producer following
// ZooKeeper finds for a topic: the <id>-m entries under topics-pub whose
// ids/<id>/master exists.
type listingWatch struct {
	zc    *registry.Registry
	topic string

	mu     sync.Mutex
	reads  int
	gaps   []string // when the listing named no master, and what it held
	master string   // the last master node of the brokerId watched
	has    bool
}

// start reads until stop; each read passes the brokerId's master node to
// seen (its url, and whether it exists).
func (w *listingWatch) start(ctx context.Context, seen func(url string, ok bool), brokerID int) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			listed, desc, url, ok, err := w.read(ctx, brokerID)
			if err != nil {
				if ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
				continue
			}
			w.mu.Lock()
			w.reads++
			w.master, w.has = url, ok
			if !listed && len(w.gaps) < 5 {
				w.gaps = append(w.gaps, time.Now().Format("15:04:05.000")+" "+desc)
			}
			w.mu.Unlock()
			seen(url, ok)
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// read is one read of the listing: whether it names a master, what it
// held, and the master node of brokerID.
func (w *listingWatch) read(ctx context.Context, brokerID int) (listed bool, desc, url string, ok bool, err error) {
	pub := w.zc.Paths().TopicsPub() + "/" + w.topic
	kids, err := w.zc.Children(ctx, pub)
	if err != nil {
		return false, "", "", false, err
	}
	for _, k := range kids {
		if !strings.HasSuffix(k, "-m") {
			continue
		}
		id := strings.TrimSuffix(k, "-m")
		_, _, err := w.zc.Get(ctx, w.zc.Paths().Root+"/brokers/ids/"+id+"/master")
		switch {
		case errors.Is(err, registry.ErrNoNode):
			desc += k + " (no master node) "
		case err != nil:
			return false, "", "", false, err
		default:
			listed = true
		}
	}
	if desc == "" {
		desc = fmt.Sprintf("children %v", kids)
	}
	data, _, err := w.zc.Get(ctx, w.zc.Paths().Broker(brokerID, -1))
	switch {
	case errors.Is(err, registry.ErrNoNode):
	case err != nil:
		return false, "", "", false, err
	default:
		url, ok = strings.TrimSpace(string(data)), true
	}
	return listed, desc, url, ok, nil
}

func (w *listingWatch) masterURL() (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.master, w.has
}

func (w *listingWatch) result() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reads, append([]string(nil), w.gaps...)
}
