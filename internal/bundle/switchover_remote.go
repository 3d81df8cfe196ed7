package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"metaq/georeplicator"
)

// opSwitchover is the control request a slave site sends its master to ask
// for a switchover (georeplicator.Receiver.Control).
const opSwitchover = "switchover"

// remoteSwitchoverTimeout bounds a switchover a slave site asked for, as
// the admin endpoint bounds one asked at the master.
const remoteSwitchoverTimeout = time.Minute

// Switchover hands mastership of this brokerId to the slave named to (its
// slave group, the group's last "-" field, or its slaveId) with nothing
// lost (see switchover). At a master it does it; at a slave site it asks
// the master over the replication link this site follows it by, which
// must be authenticated (the shared secret or mutual TLS) unless the
// master opted out with [replication] allowUnauthenticatedSwitchover, and
// returns the master's report: as it stood when the new master was told to
// take over, the old master demoting itself after that.
func (b *Bundle) Switchover(ctx context.Context, to, follow string) (SwitchoverReport, error) {
	if b.runningShipper() == nil {
		if rc := b.receiver(); rc != nil {
			return b.askMasterSwitchover(ctx, rc, to, follow)
		}
	}
	return b.switchover(ctx, to, follow, nil)
}

// askMasterSwitchover sends the switchover request over this slave's
// replication link and waits for the master's answer.
func (b *Bundle) askMasterSwitchover(ctx context.Context, rc *receiverComponent, to, follow string) (SwitchoverReport, error) {
	r := rc.Receiver()
	if r == nil {
		return SwitchoverReport{}, errors.New("switchover: this slave site copies its master with MetaQ's method, without a replication link to ask it over: run `metaq-server switchover` at the master")
	}
	body, err := r.Control(ctx, opSwitchover, map[string]string{"to": to, "follow": follow, "site": b.Config().Site.Name})
	if errors.Is(err, georeplicator.ErrControlUnsupported) {
		return SwitchoverReport{}, fmt.Errorf("switchover: %w: run `metaq-server switchover` at the master", err)
	}
	if err != nil {
		return SwitchoverReport{}, fmt.Errorf("switchover asked at this slave site: %w", err)
	}
	var rep SwitchoverReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return SwitchoverReport{}, fmt.Errorf("switchover: the master's report: %w", err)
	}
	rep.Via = r.Status().MasterAddr
	b.log.Warn("FAILOVER: the master handed over as this site asked", "to", rep.To, "generation", rep.Generation,
		"writesStopped", rep.WritesStopped, "master", rep.Via)
	return rep, nil
}

// remoteSwitchovers are the switchovers this master carries out for slave
// sites: each runs on its own goroutine, cancelled and waited for when the
// bundle closes.
type remoteSwitchovers struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	running bool // one at a time
	wg      sync.WaitGroup
}

// start runs fn on a goroutine with a context that Close cancels; an
// error once stopped or while another runs.
func (rs *remoteSwitchovers) start(fn func(ctx context.Context)) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.ctx == nil {
		rs.ctx, rs.cancel = context.WithCancel(context.Background())
	}
	switch {
	case rs.ctx.Err() != nil:
		return errors.New("switchover: this master is stopping")
	case rs.running:
		return errors.New("switchover: another site's switchover request is in progress here")
	}
	rs.running = true
	rs.wg.Add(1)
	go func() {
		defer rs.wg.Done()
		defer func() {
			rs.mu.Lock()
			rs.running = false
			rs.mu.Unlock()
		}()
		fn(rs.ctx)
	}()
	return nil
}

// stop cancels the running ones and waits for them.
func (rs *remoteSwitchovers) stop() {
	rs.mu.Lock()
	if rs.ctx == nil {
		rs.ctx, rs.cancel = context.WithCancel(context.Background())
	}
	rs.cancel()
	rs.mu.Unlock()
	rs.wg.Wait()
}

// onControl is the shipper's OnControl: requests slave sites send over
// their (authenticated) replication link.
func (b *Bundle) onControl(req *georeplicator.ControlRequest) {
	if req.Op == opTakenOver {
		b.onTakenOver(req)
		return
	}
	if req.Op != opSwitchover {
		req.Reply(nil, fmt.Errorf("this master does not know the request %q", req.Op))
		return
	}
	to := req.Args["to"]
	if to == "" {
		req.Reply(nil, errors.New("switchover: -to is required"))
		return
	}
	err := b.failover.remote.start(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, remoteSwitchoverTimeout)
		defer cancel()
		b.log.Warn("FAILOVER: a slave site asks this master to hand over", "to", to, "askedAt", req.Args["site"],
			"slave", req.From, "remote", req.Addr, "auth", req.Auth)
		// The answer goes out before the new master is told to take over:
		// the link of the slave that asked may end with that (it is the new
		// master), or with this master's demotion (it follows the new one).
		rep, err := b.switchover(ctx, to, req.Args["follow"], func(rep SwitchoverReport) {
			body, err := json.Marshal(rep)
			if err == nil {
				err = req.Reply(body, nil)
			}
			if err != nil {
				b.log.Warn("FAILOVER: answering the slave site that asked for the switchover failed", "slave", req.From, "err", err)
			}
		})
		if err != nil {
			req.Reply(nil, err) // ignored when the report went out already
			b.log.Error("FAILOVER: the switchover a slave site asked for failed", "to", to, "askedAt", req.Args["site"], "err", err)
			return
		}
		b.log.Warn("FAILOVER: handed over as a slave site asked", "to", rep.To, "askedAt", req.Args["site"], "following", rep.Following)
	})
	if err != nil {
		req.Reply(nil, err)
	}
}
