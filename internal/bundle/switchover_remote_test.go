package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// withReplicationKey turns on the replication shared secret in a shared
// server.ini and writes the same key file into each site's directory.
func withReplicationKey(t *testing.T, shared, root string, sites ...string) string {
	t.Helper()
	for _, s := range sites {
		dir := filepath.Join(root, s)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "repl.key"), []byte("the-deployment-replication-key-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return strings.Replace(shared, "[replication]\n", "[replication]\nsecretFile=repl.key\n", 1)
}

// switchoverSites starts bj (master), hf and gz (slaves). With ZooKeeper
// off the slaves reach bj through delay proxies (returned, nil with
// ZooKeeper on).
func switchoverSites(t *testing.T, root, shared string, zk bool) (bj, hf, gz *Bundle, toHF, toGZ *netproxy.Proxy) {
	t.Helper()
	natsListen := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	natsURL := "nats://" + natsListen
	bj = startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", natsListen: natsListen})
	hfSpec := siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: natsURL}
	gzSpec := siteSpec{name: "gz", slave: true, slaveID: 2, natsURL: natsURL}
	if !zk {
		bjShip := mustComp[*shipperComponent](t, bj)
		toHF, toGZ = wanProxy(t, bjShip.Addr()), wanProxy(t, bjShip.Addr())
		hfSpec.masterAddr, gzSpec.masterAddr = toHF.Addr(), toGZ.Addr()
	}
	hf = startSite(t, filepath.Join(root, "hf"), shared, hfSpec)
	gz = startSite(t, filepath.Join(root, "gz"), shared, gzSpec)
	produce(t, bj.Broker.Addr().String(), "orders", 100, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)
	return bj, hf, gz, toHF, toGZ
}

// TestSwitchoverAskedAtSlaveSite: with the replication secret set,
// `switchover -to hf` asked at gz (a third site) reaches bj over gz's
// replication link: bj hands over to hf with nothing lost and follows it,
// and gz prints bj's report (new master, generation, write downtime).
// Then, asked at bj (now a slave of hf) to hand back to bj, hf hands over
// to the site that asked: its answer arrives before bj takes over.
func TestSwitchoverAskedAtSlaveSite(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	root := t.TempDir()
	shared := withReplicationKey(t, failoverINI(""), root, "bj", "hf", "gz")
	bj, hf, gz, _, toGZ := switchoverSites(t, root, shared, false)

	// bj follows the address it is given (ZooKeeper off): a proxy aimed at
	// hf's shipper once hf ships.
	toHFMaster := wanProxy(t, "127.0.0.1:1")
	start := time.Now()
	code, body := testutil.HTTPDo(t, "POST", "http://"+gz.AdminAddr()+"/switchover?to=hf&follow="+toHFMaster.Addr(), "")
	var rep SwitchoverReport
	if err := json.Unmarshal(body, &rep); code != http.StatusOK || err != nil {
		t.Fatalf("POST /switchover at gz: %d %s (%v)", code, body, err)
	}
	if !strings.HasPrefix(rep.To, "meta-slave-group-hf/") || rep.Generation != 1 || rep.Via == "" || rep.DurableEnd <= 0 || rep.WritesStopped <= 0 {
		t.Fatalf("report at gz %+v", rep)
	}
	testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
		if hf.promotedShipper() == nil || hf.Broker.WriteRefusal() != nil {
			return errors.New("hf does not take puts yet")
		}
		return nil
	})
	t.Logf("asked at gz: writes stopped at bj for %s before the handover; hf took puts %s after the request", rep.WritesStopped, time.Since(start))
	toHFMaster.SetTarget(hf.promotedShipper().Addr())
	testutil.Eventually(t, 15*time.Second, 10*time.Millisecond, func() error {
		if bj.demotedReceiver() == nil {
			return errors.New("bj has not become a slave of hf yet")
		}
		return nil
	})
	wantDemoted(t, bj, "meta-slave-group-hf/")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	toGZ.SetTarget(hf.promotedShipper().Addr())
	toGZ.CutAll()
	wantFollowsByteIdentical(t, hf, gz, "orders")
	wantFollowsByteIdentical(t, hf, bj, "orders")

	// Asked at the site that takes over.
	toBJMaster := wanProxy(t, "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start = time.Now()
	back, err := bj.Switchover(ctx, "bj", toBJMaster.Addr())
	if err != nil {
		t.Fatalf("switchover asked at bj: %v", err)
	}
	if !strings.HasPrefix(back.To, "meta-slave-group-bj/") || back.Generation != 2 || back.Via == "" {
		t.Fatalf("report at bj %+v", back)
	}
	testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
		if bj.promotedShipper() == nil || bj.Broker.WriteRefusal() != nil {
			return errors.New("bj does not take puts yet")
		}
		return nil
	})
	t.Logf("asked at bj: writes stopped at hf for %s before the handover; bj took puts %s after the request", back.WritesStopped, time.Since(start))
	toBJMaster.SetTarget(bj.promotedShipper().Addr())
	testutil.Eventually(t, 15*time.Second, 10*time.Millisecond, func() error {
		if hf.demotedReceiver() == nil {
			return errors.New("hf has not become a slave of bj yet")
		}
		return nil
	})
	// hf started as a slave: it has no configured shipper to check.
	if r := hf.Broker.WriteRefusal(); r == nil || r.Retry || !strings.Contains(r.Reason, "meta-slave-group-bj/") || hf.promotedShipper() != nil {
		t.Fatalf("hf after handing back: refusal %+v, still ships %t", r, hf.promotedShipper() != nil)
	}
	produce(t, bj.Broker.Addr().String(), "orders", 20, "bj-again")
	wantFollowsByteIdentical(t, bj, hf, "orders")
}

// TestSwitchoverAskedAtSlaveSiteZooKeeper: with ZooKeeper on (and the
// secret), a switchover asked at gz moves the master node of the brokerId
// to hf, and bj finds hf there and follows it.
func TestSwitchoverAskedAtSlaveSiteZooKeeper(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := withReplicationKey(t, failoverINIZK(zk, zkRoot, ""), root, "bj", "hf", "gz")
	bj, hf, gz, _, _ := switchoverSites(t, root, shared, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := gz.Switchover(ctx, "hf", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rep.To, "meta-slave-group-hf/") || rep.Generation != 1 {
		t.Fatalf("report at gz %+v", rep)
	}
	zc := zkClient(t, &testEnv{zk: zk, root: zkRoot})
	testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
		data, _, err := zc.Get(ctx, zkRoot+"/brokers/ids/0/master")
		if err != nil || string(data) != hf.Broker.URL() || bj.demotedReceiver() == nil || hf.Broker.WriteRefusal() != nil {
			return fmt.Errorf("ids/0/master = %q %v, bj demoted %t, hf refuses puts: %+v", data, err, bj.demotedReceiver() != nil, hf.Broker.WriteRefusal())
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 20, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	wantFollowsByteIdentical(t, hf, gz, "orders")
}

// TestSwitchoverAskedAtSlaveSiteNeedsAuthentication: without the secret
// (and without mutual TLS) a switchover asked at a slave site is refused
// by the master, with an error that says what to do; bj stays master and
// takes puts, hf stays its slave. With allowUnauthenticatedSwitchover=true
// the same request goes through.
func TestSwitchoverAskedAtSlaveSiteNeedsAuthentication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("allowUnauthenticatedSwitchover=%t", allow), func(t *testing.T) {
			root := t.TempDir()
			shared := failoverINI(fmt.Sprintf("allowUnauthenticatedSwitchover=%t\n", allow))
			bj, hf, _, _, _ := switchoverSites(t, root, shared, false)
			code, body := testutil.HTTPDo(t, "POST", "http://"+hf.AdminAddr()+"/switchover?to=hf", "")
			if allow {
				var rep SwitchoverReport
				if err := json.Unmarshal(body, &rep); code != http.StatusOK || err != nil || rep.Generation != 1 {
					t.Fatalf("POST /switchover at hf, allowed: %d %s (%v)", code, body, err)
				}
				testutil.Eventually(t, 15*time.Second, 5*time.Millisecond, func() error {
					if hf.promotedShipper() == nil {
						return errors.New("hf is not master yet")
					}
					return nil
				})
				return
			}
			if code != http.StatusInternalServerError || !strings.Contains(string(body), "secretFile") ||
				!strings.Contains(string(body), "run it at the master") {
				t.Fatalf("POST /switchover at hf without a secret: %d %s", code, body)
			}
			if r := bj.Broker.WriteRefusal(); r != nil || hf.promotedShipper() != nil {
				t.Fatalf("after the refusal: bj refuses puts (%+v) or hf is master", r)
			}
			produce(t, bj.Broker.Addr().String(), "orders", 10, "after")
			waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
		})
	}
}
