package georeplicator

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"metaq/broker"
	"metaq/broker/config"
	"metaq/broker/outbox"
	"metaq/broker/store"
	"metaq/internal/netproxy"
	"metaq/internal/testutil"
)

// gatewayRig is a master (bj) and a slave site's broker (hf) that forwards
// puts to it over the gateway link, each path across its own emulated WAN
// link (netproxy, delay one way): producers at hf put either straight to
// bj (direct) or to hf's broker (gateway). The gateway benchmarks and the
// gateway link's tests build their sites with newGatewayRig; tweaks change
// hf's gateway options before it starts.
type gatewayRig struct {
	bj, hf          *broker.Broker
	bjStore         *store.Store
	direct, gateway *netproxy.Proxy // WAN links to bj's port
	gw              *broker.Gateway // hf's
	ob              *outbox.Outbox  // hf's, with saf
}

func newGatewayRig(b testing.TB, oneWay time.Duration, saf bool, tweaks ...func(*broker.GatewayOptions)) *gatewayRig {
	b.Helper()
	dir := b.TempDir()
	secret := []byte("the-deployment-replication-key-1")
	log := slog.New(slog.DiscardHandler)
	var bjStore *store.Store
	start := func(name string) *broker.Broker {
		site := "forwardPuts=true\n"
		if saf {
			site += "storeAndForward=true\n"
		}
		ini := fmt.Sprintf("[system]\nbrokerId=0\nhostName=127.0.0.1\nserverPort=8123\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=10000\nmaxSegmentSize=1073741824\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=%s\n[zookeeper]\nzk.zkEnable=false\n[site]\n%s[topic=logs]\nnumPartitions=4\n",
			filepath.Join(dir, name), site)
		cfg, _, err := config.Parse("server.ini", []byte(ini))
		if err != nil {
			b.Fatal(err)
		}
		st, err := store.Open(store.Options{Dir: filepath.Join(dir, name)})
		if err != nil {
			b.Fatal(err)
		}
		br, err := broker.New(broker.Options{Config: cfg, Store: st, ListenAddr: "127.0.0.1:0", Logger: log})
		if err != nil {
			b.Fatal(err)
		}
		if err := br.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { br.Close(); st.Close() })
		if name == "bj" {
			bjStore = st
		}
		return br
	}
	// deploy/'s link settings: the secret and mutual TLS.
	ca, caKey := testutil.WriteCert(b, dir, "ca", true, nil, nil)
	testutil.WriteCert(b, dir, "bj", false, ca, caKey)
	testutil.WriteCert(b, dir, "hf", false, ca, caKey)
	p := func(n string) string { return filepath.Join(dir, n) }
	serverTLS, err := ServerTLS(p("bj.pem"), p("bj.key"), p("ca.pem"))
	if err != nil {
		b.Fatal(err)
	}
	clientTLS, err := ClientTLS(p("hf.pem"), p("hf.key"), p("ca.pem"), "")
	if err != nil {
		b.Fatal(err)
	}
	g := &gatewayRig{bj: start("bj"), hf: start("hf")}
	g.bjStore = bjStore
	ln, err := g.bj.ListenFirstBytes(GatewayFirstByte)
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var links GatewayLinks // as the bundle serves them: a newer link of hf supersedes the older
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, release, err := links.Accept(nc, [][]byte{secret}, serverTLS)
				if err != nil {
					nc.Close()
					return
				}
				defer release()
				g.bj.ServeConn(c)
			}()
		}
	}()
	for _, p := range []**netproxy.Proxy{&g.direct, &g.gateway} {
		px, err := netproxy.New(g.bj.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		px.SetDelay(oneWay)
		b.Cleanup(func() { px.Close() })
		*p = px
	}
	g.hf.RefuseWrites("slave", broker.Refusal{Reason: "this broker is a slave"})
	var ob *outbox.Outbox
	if saf {
		if ob, err = outbox.Open(outbox.Options{Dir: filepath.Join(dir, "hf", "outbox")}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { ob.Close() })
		g.ob = ob
	}
	o := &broker.GatewayOptions{
		Outbox: ob,
		Holder: "slave",
		Master: func(context.Context) (string, error) { return g.gateway.Addr(), nil },
		Dial: func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return GatewayDialAs(nc, secret, true, clientTLS, "hf/0")
		},
	}
	for _, tw := range tweaks {
		tw(o)
	}
	var gerr error
	if g.gw, gerr = g.hf.SetGateway(o); gerr != nil {
		b.Fatal(gerr)
	}
	return g
}
