package bundle

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"metaq/broker"
	"metaq/broker/outbox"
	"metaq/broker/registry"
	"metaq/georeplicator"
	"metaq/internal/backoff"
	"metaq/topology"
)

// startGateway gives the broker its write gateway (broker/gateway.go):
// while this bundle is a replica (its write gate's replicaHolder refuses
// client writes), puts to topics forwarded at this site ([site]
// forwardPuts, a topic's forwardPuts) are carried to the master its
// brokerId registered in ZooKeeper, over one gateway link to the master's
// MetaQ port (georeplicator/gatewaylink.go: compressed, authenticated with
// [replication] secretFile, inside TLS with the site's replication
// certificates when it has them), and answered with the master's answer. A
// topic not forwarded is refused as before; a master never forwards (no
// replicaHolder refusal). While any topic is forwarded, the clients'
// transactions are carried to the master too, each client connection's
// on a gateway link of its own (broker/gatewaytx.go). Without ZooKeeper the link goes to the master's
// replication address (masterAddress, or what gossip names after a
// failover), where a master with a [replication] listen of its own serves
// gateway links too (serveGatewayOn). A samsa slave (gregor) has no gateway.
func (b *Bundle) startGateway() error {
	if b.opts.Mode == ModeGregor {
		return nil
	}
	dial, err := b.gatewayLinkDial()
	if err != nil {
		return fmt.Errorf("bundle: write gateway: %w", err)
	}
	linkDial, err := b.gatewayOwnLinkDial()
	if err != nil {
		return fmt.Errorf("bundle: write gateway: %w", err)
	}
	ob, err := b.openOutbox()
	if err != nil {
		return fmt.Errorf("bundle: write gateway: %w", err)
	}
	if _, err := b.Broker.SetGateway(&broker.GatewayOptions{
		Holder:   replicaHolder,
		Master:   b.gatewayMasterAddr,
		Dial:     dial,
		LinkDial: linkDial,
		Outbox:   ob,
		// Read at start, as the outbox's bounds are.
		MaxInFlightBytes: b.Config().Site.ForwardMaxInFlightBytes,
	}); err != nil {
		if ob != nil {
			ob.Close()
		}
		return fmt.Errorf("bundle: write gateway: %w", err)
	}
	b.outbox = ob
	return nil
}

// gatewayLinkDial returns the dial of gateway links to a master's MetaQ
// port (host:port): TCP, then georeplicator.GatewayDial's handshake with
// this site's current replication secret, compressed unless the site's
// replication link says compression=none, inside TLS with the site's
// replication certificates when it has them. The write gateway dials its
// master with it, and a master handing over (holdPuts) the new master, to
// pass on the puts that keep their ids.
func (b *Bundle) gatewayLinkDial() (func(context.Context, string) (net.Conn, error), error) {
	secrets, err := ReplicationSecrets(b.Config())
	if err != nil {
		return nil, err
	}
	var secret []byte
	if len(secrets) > 0 {
		secret = secrets[0] // a slave proves with its current secret only
	}
	tc, err := gatewayClientTLS(b)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return georeplicator.GatewayDialContext(ctx, nc, secret, b.gatewayCompresses(), tc)
	}, nil
}

// gatewayOwnLinkDial returns the dial of the write gateway's own link
// (its puts and its outbox's drain): gatewayLinkDial's, with a hello that
// names this gateway (its site and brokerId) and a new epoch, so that the
// master supersedes this gateway's older links
// (georeplicator.GatewayDialAs). A master that predates such hellos
// refuses them; the link is then dialed as gatewayLinkDial does, without
// superseding, and the fallback is logged once per master address.
func (b *Bundle) gatewayOwnLinkDial() (func(context.Context, string) (net.Conn, error), error) {
	secrets, err := ReplicationSecrets(b.Config())
	if err != nil {
		return nil, err
	}
	var secret []byte
	if len(secrets) > 0 {
		secret = secrets[0]
	}
	tc, err := gatewayClientTLS(b)
	if err != nil {
		return nil, err
	}
	cfg := b.Config()
	name := fmt.Sprintf("%s/%d", cfg.Site.Name, cfg.System.BrokerID)
	var mu sync.Mutex
	anonymous := map[string]bool{} // masters that refused a named hello
	return func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		mu.Lock()
		old := anonymous[addr]
		mu.Unlock()
		if !old {
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			c, err := georeplicator.GatewayDialAsContext(ctx, nc, secret, b.gatewayCompresses(), tc, name)
			if !errors.Is(err, georeplicator.ErrGatewayVersion) {
				return c, err
			}
			b.log.Warn("GATEWAY: the master does not know named gateway links; its links are not superseded (a late delivery on a link given up on could store outbox entries twice)",
				"master", addr, "err", err)
			mu.Lock()
			anonymous[addr] = true
			mu.Unlock()
		}
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return georeplicator.GatewayDialContext(ctx, nc, secret, b.gatewayCompresses(), tc)
	}, nil
}

// gatewayCompresses says whether the gateway link is compressed (zstd,
// the one codec it has): unless this site's replication link is set to
// compression=none (async_slave.properties, else [replication]).
func (b *Bundle) gatewayCompresses() bool {
	mode := b.Config().Replication.Compression
	if sl := b.SlaveConfig(); sl != nil && sl.Compression != "" {
		mode = sl.Compression
	}
	m, err := georeplicator.ParseMode(mode)
	return err != nil || m != georeplicator.ModeNone
}

// gatewayMasterAddr is where the gateway link goes: the MetaQ address of
// the master ZooKeeper names; without ZooKeeper, the replication address
// this site follows, which serves gateway links as well.
func (b *Bundle) gatewayMasterAddr(ctx context.Context) (string, error) {
	if b.Registry != nil {
		return b.newMasterAddr(ctx)
	}
	sl := b.SlaveConfig()
	if sl == nil || sl.MasterAddress == "" {
		return "", errors.New("no ZooKeeper and no masterAddress to follow: the master is not known")
	}
	return b.gossipResolver(sl.MasterAddress).MasterAddr(ctx)
}

// followMasterInGateway tells the write gateway the master its brokerId's
// node in ZooKeeper (ids/<brokerId>/master) names, each time the node
// changes: a site learns of a promotion at another site there (the new
// master registers in every site's ensemble), and the gateway leaves its
// connection to the old master at once (Gateway.FollowMaster) instead of
// sending puts to a paused one until a put's time and MaxWait are up.
// Without ZooKeeper the gateway finds the master when it has no
// connection, as before.
func (b *Bundle) followMasterInGateway(ctx context.Context) {
	r := b.Registry
	path := r.Paths().Broker(b.Config().System.BrokerID, -1)
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	for ctx.Err() == nil {
		w, err := b.tellGatewayTheMaster(ctx, r, path)
		if err != nil {
			b.log.Debug("GATEWAY: watching the master node failed; trying again", "node", path, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(retry.Next()):
			}
			continue
		}
		retry.Reset()
		select {
		case <-ctx.Done():
		case <-w:
		}
	}
}

// tellGatewayTheMaster reads the master node (watching it, or its
// creation) and passes the master's MetaQ address to the gateway when the
// master is another broker.
func (b *Bundle) tellGatewayTheMaster(ctx context.Context, r *registry.Registry, path string) (registry.Watch, error) {
	data, w, err := r.GetW(ctx, path)
	if errors.Is(err, registry.ErrNoNode) {
		ok, ew, err := r.ExistsW(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", path, err)
		}
		if ok {
			return closedWatch(), nil // created meanwhile: read it
		}
		return ew, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	url := strings.TrimSpace(string(data))
	if g := b.Broker.Gateway(); g != nil && url != "" && url != b.Broker.URL() {
		g.FollowMaster(metaqHostPort(url))
	}
	return w, nil
}

// openOutbox opens the store-and-forward outbox, <dataPath>/outbox, when
// a topic stores and forwards at this site or the directory is there
// (entries left to drain); nil otherwise, so a bundle that never stores
// and forwards adds nothing to MetaQ's files. The bounds are [site]
// outboxMaxBytes and outboxMaxAgeMs, read at start.
func (b *Bundle) openOutbox() (*outbox.Outbox, error) {
	cfg := b.Config()
	dir := filepath.Join(cfg.System.DataPath, "outbox")
	want := cfg.Site.StoreAndForward
	for i := range cfg.Topics {
		want = want || cfg.Topics[i].StoresAndForwards(cfg.Site)
	}
	if _, err := os.Stat(dir); err == nil {
		want = true
	}
	if !want {
		return nil, nil
	}
	return outbox.Open(outbox.Options{Dir: dir, MaxBytes: cfg.Site.OutboxMaxBytes, MaxAge: cfg.Site.OutboxMaxAge,
		Logger: b.log.With("component", "outbox")})
}

// gatewayClientTLS is the TLS a gateway link is dialed with: the
// certificates of [replication] (tlsCert, tlsKey, tlsCA: this site's, which
// it also serves replication with), else those async_slave.properties
// gives the replication link; nil without either.
func gatewayClientTLS(b *Bundle) (*tls.Config, error) {
	r := b.Config().Replication
	if r.TLSCert != "" || r.TLSCA != "" {
		return georeplicator.ClientTLS(r.TLSCert, r.TLSKey, r.TLSCA, "")
	}
	if sl := b.SlaveConfig(); sl != nil && (sl.TLSCert != "" || sl.TLSCA != "") {
		return georeplicator.ClientTLS(sl.TLSCert, sl.TLSKey, sl.TLSCA, "")
	}
	return nil, nil
}

// serveGatewayLinks serves the gateway links of slave sites' brokers that
// reach this broker's MetaQ port (first byte georeplicator.GatewayFirstByte)
// until ctx ends: each, once authenticated, is served as a MetaQ client
// connection. A bundle that is a replica serves them too (a put reaching
// it is refused, or forwarded again, as any client's).
func (b *Bundle) serveGatewayLinks(ctx context.Context) {
	ln, err := b.Broker.ListenFirstBytes(georeplicator.GatewayFirstByte)
	if err != nil {
		b.log.Error("GATEWAY: not serving gateway links", "err", err)
		return
	}
	b.serveGatewayOn(ctx, ln)
}

// serveGatewayOn serves the gateway links ln accepts (the MetaQ port's, or
// those of a [replication] listen of its own) until ctx ends or ln is
// closed, and closes ln.
func (b *Bundle) serveGatewayOn(ctx context.Context, ln net.Listener) {
	defer ln.Close()
	secrets, err := ReplicationSecrets(b.Config())
	if err != nil {
		b.log.Error("GATEWAY: not serving gateway links", "err", err)
		return
	}
	var tc *tls.Config
	if r := b.Config().Replication; r.TLSCert != "" {
		if tc, err = georeplicator.ServerTLS(r.TLSCert, r.TLSKey, r.TLSCA); err != nil {
			b.log.Error("GATEWAY: not serving gateway links", "err", err)
			return
		}
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				b.log.Warn("GATEWAY: accept failed", "err", err)
			}
			return
		}
		ok := b.roleWatchers.Go(func() {
			c, release, err := b.gatewayLinkSet.Accept(nc, secrets, tc)
			if err != nil {
				nc.Close()
				b.log.Warn("GATEWAY: refused a gateway link", "remote", nc.RemoteAddr().String(), "err", err)
				return
			}
			defer release()
			b.gatewayLinks.Add(1)
			if id, named := georeplicator.GatewayLinkName(c); named {
				b.log.Info("GATEWAY: serving a slave site's gateway link", "remote", nc.RemoteAddr().String(), "gateway", id.Name, "epoch", id.Epoch)
			} else {
				b.log.Info("GATEWAY: serving a slave site's gateway link", "remote", nc.RemoteAddr().String())
			}
			stopConn := context.AfterFunc(ctx, func() { c.Close() })
			defer stopConn()
			b.Broker.ServeConn(c)
		})
		if !ok {
			nc.Close()
			return
		}
	}
}

// gatewayReport is the write gateway's counters and outbox for /lag, the
// dashboard and /metrics; nil without a gateway.
func gatewayReport(b *Bundle) *topology.GatewayReport {
	if b.Broker == nil {
		return nil
	}
	g := b.Broker.Gateway()
	if g == nil {
		return nil
	}
	st := g.Stats()
	r := &topology.GatewayReport{Forwarded: st.Forwarded, NotSent: st.NotSent, Unknown: st.Unknown, Retried: st.Retried, Dials: st.Dials,
		Accepted: st.Accepted, Refused: st.Refused, Drained: st.Drained, Deduplicated: st.Deduplicated,
		Full: st.Full, InFlightBytes: st.InFlightBytes, MaxInFlightBytes: st.MaxInFlightBytes}
	if ob, ok := g.OutboxStats(); ok {
		r.Outbox = &topology.OutboxReport{Entries: ob.Entries, Bytes: ob.Bytes, OldestAgeSeconds: ob.OldestAge, MaxBytes: ob.MaxBytes,
			MaxAgeSeconds: ob.MaxAge, DrainError: ob.DrainError}
	}
	return r
}
