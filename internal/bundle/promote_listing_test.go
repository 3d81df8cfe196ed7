package bundle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// TestPromotionListsTheNewMaster: in deploy/'s layout (one ZooKeeper per
// site, deploy/'s session and gossip timing, forwardPuts at every site), bj
// is killed and hf promoted (no -force, tried until the checks let it).
// Once the promotion returned, what clients read names hf: ids/0/master
// and topics-pub/orders/0-m in hf's view root and in hf's and bj's real
// roots, and the view's producers marker no longer names bj's dead
// address (producers on the view read the brokers again). Each listing's
// changes are logged with their times, to match a client's errors with.
func TestPromotionListsTheNewMaster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, forwardingEverywhere(sitesSpec{deploy: true, perSiteZK: true, sessionTimeout: 30 * time.Second, probeInterval: 500 * time.Millisecond}))
	s.produce("bj", "orders", 10)
	bj, hf := s.site("bj"), s.site("hf")
	waitCaughtUp(t, bj, hf, "orders", 30*time.Second)
	bjURL, hfURL := bj.Broker.URL(), hf.Broker.URL()
	type listing struct {
		label, zk, root string
		zc              *registry.Registry
	}
	ls := []*listing{{label: "hf's view", zk: s.zks["hf"], root: s.zkRoot + "-view-hf"},
		{label: "hf's root", zk: s.zks["hf"], root: s.zkRoot}, {label: "bj's root", zk: s.zks["bj"], root: s.zkRoot}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, l := range ls {
		l.zc = zkClient(t, &testEnv{zk: l.zk, root: l.root})
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := ""
			for ctx.Err() == nil {
				if d := describeListing(ctx, l.zc, l.root); d != last && ctx.Err() == nil {
					t.Logf("LISTING %s %s: %s", time.Now().Format("15:04:05.000"), l.label, d)
					last = d
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
	}
	t.Logf("KILL bj (%s) at %s", bjURL, time.Now().Format("15:04:05.000"))
	s.kill("bj")
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pcancel()
	for {
		_, err := hf.Promote(pctx, false)
		if err == nil {
			break
		}
		if pctx.Err() != nil {
			t.Fatalf("promote hf: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("PROMOTED hf (%s) at %s", hfURL, time.Now().Format("15:04:05.000"))
	for _, l := range ls {
		testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
			m, _, err := l.zc.Get(ctx, l.root+"/brokers/ids/0/master")
			// A view may name hf in either spelling (registry.SameViewURL).
			if err != nil || !registry.SameViewURL(string(m), hfURL) {
				return fmt.Errorf("%s: ids/0/master = %q (%v), want hf's %s", l.label, m, err, hfURL)
			}
			kids, err := l.zc.Children(ctx, l.root+"/brokers/topics-pub/orders")
			if err != nil || !slices.Contains(kids, "0-m") {
				return fmt.Errorf("%s: topics-pub/orders = %v (%v), want 0-m listed", l.label, kids, err)
			}
			for _, k := range kids {
				if strings.HasPrefix(k, "view") {
					d, _, err := l.zc.Get(ctx, l.root+"/brokers/topics-pub/orders/"+k)
					if err != nil || strings.Contains(string(d), bjURL) {
						return fmt.Errorf("%s: the producers marker %s = %q (%v) still names bj's dead %s", l.label, k, d, err, bjURL)
					}
				}
			}
			return nil
		})
		t.Logf("%s names hf at %s", l.label, time.Now().Format("15:04:05.000"))
	}
}

// describeListing is what a producer reads at root for orders' brokerId
// 0: the master node, topics-pub/orders' children and their cversion, and
// the view's producers marker.
func describeListing(ctx context.Context, zc *registry.Registry, root string) string {
	var b strings.Builder
	m, _, err := zc.Get(ctx, root+"/brokers/ids/0/master")
	fmt.Fprintf(&b, "ids/0/master=%q(%v) ", m, err)
	pub := root + "/brokers/topics-pub/orders"
	kids, err := zc.Children(ctx, pub)
	_, st, _ := zc.Get(ctx, pub)
	fmt.Fprintf(&b, "topics-pub/orders=%v(%v) cversion=%d", kids, err, st.Cversion)
	for _, k := range kids {
		if strings.HasPrefix(k, "view") {
			d, _, _ := zc.Get(ctx, pub+"/"+k)
			fmt.Fprintf(&b, " %s=%q", k, d)
		}
	}
	return b.String()
}
