package bundle

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/wire"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// TestGatewayFollowsASwitchoverAtOnce: gz forwards puts ([site]
// forwardPuts) to bj over a link that goes silent (every byte held, the
// connection open: bj paused as gz sees it) with a put in flight; bj hands
// over to hf. gz's next puts reach hf as soon as gz's ZooKeeper names hf,
// not only once the silent link's put has waited its time and MaxWait
// (the put in flight stays unanswered meanwhile: its outcome is unknown,
// it is not sent again).
func TestGatewayFollowsASwitchoverAtOnce(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("multi-site test skipped in -short mode")
	}
	s := newSites(t, sitesSpec{overlays: map[string]string{"gz": "\n[site]\nforwardPuts=true\n"}})
	bj, gz := s.site("bj"), s.site("gz")
	bjAddr := metaqHostPort(bj.Broker.URL())
	link, err := netproxy.New(bjAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { link.Close() })
	// gz's gateway as the bundle wires it, its link to bj through the
	// proxy, and a MaxWait long enough that a loaded machine's switchover
	// fits in it.
	const maxWait = 10 * time.Second
	dial, err := gz.gatewayLinkDial()
	if err != nil {
		t.Fatal(err)
	}
	own, err := gz.gatewayOwnLinkDial()
	if err != nil {
		t.Fatal(err)
	}
	g, err := gz.Broker.SetGateway(&broker.GatewayOptions{Holder: replicaHolder, Master: gz.gatewayMasterAddr, Dial: dial, MaxWait: maxWait,
		LinkDial: func(ctx context.Context, addr string) (net.Conn, error) {
			if addr == bjAddr {
				return own(ctx, link.Addr())
			}
			return own(ctx, addr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	put := func(body string) *wire.Put {
		return &wire.Put{Topic: "orders", Partition: 0, Checksum: wire.Checksum([]byte(body)), Body: []byte(body)}
	}
	first := dialWire(t, gz.Broker.Addr().String())
	if r, ok := first.do(put("through the link")).(*wire.Result); !ok || r.Code != wire.StatusOK {
		t.Fatalf("put at gz forwarded to bj: %v", r)
	}

	release := link.HoldOpen() // bj, as gz's gateway sees it, is paused
	t.Cleanup(release)
	sent := time.Now()
	first.send(put("in flight at the paused master"))
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if g.Stats().InFlightBytes == 0 {
			return errors.New("the put is not on its way to bj yet")
		}
		return nil
	})
	answered := make(chan wire.Command, 1)
	go func() {
		first.nc.SetReadDeadline(time.Now().Add(time.Minute))
		cmd, _ := first.dec.Decode()
		answered <- cmd
	}()

	s.switchover("bj", "hf")
	t.Logf("switchover done %v after the put in flight was sent", time.Since(sent).Round(time.Millisecond))

	second := dialWire(t, gz.Broker.Addr().String())
	for i := 0; ; i++ {
		began := time.Now()
		second.send(put("after the switchover"))
		second.nc.SetReadDeadline(time.Now().Add(time.Minute))
		cmd, err := second.dec.Decode()
		if err != nil {
			t.Fatalf("put at gz after the switchover: %v", err)
		}
		select {
		case c := <-answered:
			t.Fatalf("the put in flight at the paused bj was answered (%v) before any put after the switchover reached hf (last: %v, stats %+v)", c, cmd, g.Stats())
		default:
		}
		if r, ok := cmd.(*wire.Result); ok && r.Code == wire.StatusOK {
			t.Logf("put %d after the switchover answered by hf after %v: %s", i+1, time.Since(began).Round(time.Millisecond), r.Body)
			break
		}
		t.Logf("put %d after the switchover: %v", i+1, cmd)
	}
}
