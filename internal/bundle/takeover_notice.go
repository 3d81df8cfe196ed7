package bundle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/georeplicator"
)

// A switchover's new master tells the old master, over the replication
// link the handover ran on, the generation it raised and where it ships
// its log (opTakenOver), before it stops following. The old master waits
// for the new generation before it steps down (awaitNewGeneration); it
// reads it in ZooKeeper, its own ensemble and the other sites' through
// gossip's site views, and from gossip. With one ensemble per site and
// gossip off it reads only its own ensemble, which the new master does
// not reach: the notice is how it learns the generation, and the address
// is how it follows (its own ensemble does not name the new master).
// The notice also names the new master's MetaQ address: the old master
// passes the puts it held during the handover on to it at once, without
// waiting until ZooKeeper or gossip names the new master (its
// registration may take seconds on a loaded machine, and the new master
// takes puts before it registers).

// opTakenOver is the control request a switchover's new master sends the
// old master: args generation, replication (its replication address as
// slaves dial it, "" when not known before its shipper starts), metaq (its
// MetaQ host:port, where producers put) and site. An old master of an
// earlier build ignores metaq.
const opTakenOver = "taken-over"

// takenOverWait bounds the new master's notice.
const takenOverWait = 3 * time.Second

// takeoverNotices is what the old master expects and got during a
// handover. mu is a leaf.
type takeoverNotices struct {
	mu   sync.Mutex
	to   string // the slave (group/slaveId) told to take over; "" when none
	got  takeoverNotice
	from string // got's sender
}

type takeoverNotice struct {
	gen   uint64
	addr  string // replication address
	metaq string // MetaQ host:port ("" from a new master of an earlier build)
	site  string
}

// expect starts a handover to the slave named to (clearing an earlier
// notice); "" ends it.
func (n *takeoverNotices) expect(to string) {
	n.mu.Lock()
	n.to, n.got, n.from = to, takeoverNotice{}, ""
	n.mu.Unlock()
}

// notice is the notice the current handover's new master sent, zero when none.
func (n *takeoverNotices) notice() takeoverNotice {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.got
}

// onTakenOver is the old master's answer to opTakenOver: taken only from
// the slave this master is handing over to, for a generation above its
// own.
func (b *Bundle) onTakenOver(req *georeplicator.ControlRequest) {
	gen, err := strconv.ParseUint(req.Args["generation"], 10, 64)
	if err != nil {
		req.Reply(nil, fmt.Errorf("%s: generation %q: %w", opTakenOver, req.Args["generation"], err))
		return
	}
	id, err := b.identity()
	if err != nil {
		req.Reply(nil, err)
		return
	}
	n := &b.failover.notices
	n.mu.Lock()
	to := n.to
	ok := to != "" && req.From == to && gen > id.Generation()
	if ok {
		n.got = takeoverNotice{gen: gen, addr: req.Args["replication"], metaq: req.Args["metaq"], site: req.Args["site"]}
		n.from = req.From
	}
	n.mu.Unlock()
	if !ok {
		req.Reply(nil, fmt.Errorf("%s from %s at generation %d: this master (generation %d) is not handing over to it", opTakenOver, req.From, gen, id.Generation()))
		return
	}
	b.log.Warn("FAILOVER: the new master says it took over", "from", req.From, "site", req.Args["site"], "generation", gen,
		"replication", req.Args["replication"], "metaq", req.Args["metaq"], "auth", req.Auth)
	req.Reply(nil, nil)
}

// tellOldMaster sends the old master the generation this site raised as
// a switchover's new master, and where it will ship its log, over the
// link the handover came on (rc's, still open). A failure is logged: the
// old master also reads ZooKeeper and gossip.
func (b *Bundle) tellOldMaster(ctx context.Context, rc *receiverComponent, gen uint64) {
	r := rc.Receiver()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, takenOverWait)
	defer cancel()
	_, err := r.Control(ctx, opTakenOver, map[string]string{
		"generation":  strconv.FormatUint(gen, 10),
		"replication": b.replicationAdvertiseHint(),
		"metaq":       metaqHostPort(b.Broker.URL()),
		"site":        b.Config().Site.Name,
	})
	switch {
	case errors.Is(err, georeplicator.ErrControlUnsupported):
		b.log.Info("FAILOVER: the old master takes no requests over the link; it learns the new generation from ZooKeeper or gossip", "generation", gen)
	case err != nil:
		b.log.Warn("FAILOVER: telling the old master the new generation over the replication link failed; it learns it from ZooKeeper or gossip", "generation", gen, "err", err)
	}
}

// replicationAdvertiseHint is the replication address this site's
// shipper will advertise once a promotion starts it, as far as the
// configuration tells before it runs: [replication] advertise, the MetaQ
// port when the stream shares it, or a [replication] listen with a fixed
// port; "" otherwise.
func (b *Bundle) replicationAdvertiseHint() string {
	cfg := b.Config()
	switch {
	case cfg.Replication.Advertise != "":
		return cfg.Replication.Advertise
	case !cfg.Replication.ListenSet:
		return strings.TrimPrefix(b.Broker.URL(), "meta://")
	case !strings.HasSuffix(cfg.Replication.Listen, ":0"):
		return advertiseAddr(cfg.Replication.Listen, cfg)
	}
	return ""
}
