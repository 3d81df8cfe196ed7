package configsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"metaq/broker/config"
	"metaq/internal/atomicfile"
	"metaq/internal/backoff"
)

// Agent applies pushed versions of server.ini on one site. Create it with
// NewAgent, then Start; Close stops it. See the package documentation for
// what an apply does.
type Agent struct {
	o      Options
	log    *slog.Logger
	host   string
	nc     *nats.Conn
	ownsNC bool
	kv     jetstream.KeyValue
	sub    *nats.Subscription

	quit    chan struct{}
	ready   chan struct{}
	kick    chan struct{}
	wg      sync.WaitGroup
	closing atomic.Bool
	started atomic.Bool
	cancel  context.CancelFunc

	// mu guards the fields below; the apply goroutine writes them and the
	// NATS request handler reads them.
	mu        sync.Mutex
	state     SiteState
	processed uint64 // highest desired version handled, success or not
	// head is the Digest of version processed, the link a successor's Prev
	// must lead to ("" before the first version, or when an older agent
	// recorded it: the next signed version is taken on trust).
	head string
	// reapply is the version the sidecar records when the file on disk is
	// no longer its bytes (edited by hand): that same version (same bytes)
	// may be applied again; older ones are still refused.
	reapply sidecar
	results map[uint64]Result // recent results by version
	waiters map[uint64][]string
	// trust is what the configuration in effect accepts (see sign.go): the
	// running one at start, then each applied version's.
	trust trust
}

// maxParkedVersions bounds the versions (and the pushers per version) the
// agent keeps waiting to answer.
const maxParkedVersions = 64

// sidecar remembers which version the file on disk is, across restarts.
type sidecar struct {
	Version   uint64    `json:"version"`
	SHA256    string    `json:"sha256"`
	AppliedAt time.Time `json:"appliedAt"`
	// Digest is the version's Digest: the head of the chain of signed
	// versions at this site, kept even when the file is edited by hand so
	// that a restart cannot be made to apply an older version.
	Digest string `json:"digest,omitempty"`
}

// NewAgent checks o, fills its defaults and returns an agent that is not yet
// connected.
func NewAgent(o Options) (*Agent, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	tr, err := trustOf(o.Running.NATS)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	return &Agent{
		trust:   tr,
		o:       o,
		log:     o.Logger.With("site", o.Site),
		host:    host,
		quit:    make(chan struct{}),
		ready:   make(chan struct{}),
		kick:    make(chan struct{}, 1),
		results: make(map[uint64]Result),
		waiters: make(map[uint64][]string),
	}, nil
}

// Site returns the site name the agent answers for.
func (a *Agent) Site() string { return a.o.Site }

// State returns a copy of the state the agent last recorded.
func (a *Agent) State() SiteState {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.state
	s.PendingRestart = slices.Clone(s.PendingRestart)
	return s
}

// Start checks the local file and starts the agent's goroutine, which
// connects to NATS (retrying for as long as the server is unreachable, so a
// bundle starts even when NATS is down), records the site state and watches
// the desired version. Start does not wait for any of that: Ready is closed
// once the agent is connected and subscribed. The first version is applied
// in the background. ctx only bounds Start itself.
func (a *Agent) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if a.closing.Load() || !a.started.CompareAndSwap(false, true) {
		return errors.New("configsync: agent already started or closed")
	}
	data, err := os.ReadFile(a.o.ConfigPath)
	if err != nil {
		return fmt.Errorf("configsync: agent: %w", err)
	}
	// Files named in [nats] must exist now: a typo should fail the bundle's
	// start, not turn into an endless reconnect loop.
	for _, f := range []string{a.o.NATS.CredsFile, a.o.NATS.TLSCert, a.o.NATS.TLSKey, a.o.NATS.TLSCA} {
		if f == "" || a.o.Conn != nil {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("configsync: agent: [nats]: %w", err)
		}
	}
	sum := hashHex(data)
	a.mu.Lock()
	a.state = SiteState{Site: a.o.Site, Host: a.host, SHA256: sum, HeartbeatInterval: a.o.HeartbeatInterval}
	if sc, err := a.readSidecar(); err == nil && sc.Version > 0 {
		// The last version applied here bounds what may come next, even
		// when the file was edited by hand since.
		a.processed, a.head = sc.Version, sc.Digest
		if sc.SHA256 == sum {
			a.state.Version, a.state.AppliedAt = sc.Version, sc.AppliedAt
		} else {
			a.reapply = sc
		}
	}
	a.mu.Unlock()
	runCtx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		a.run(runCtx)
	}()
	return nil
}

// Ready is closed once the agent is connected, subscribed to its subject
// and has recorded its state; the first version may still be applying.
func (a *Agent) Ready() <-chan struct{} { return a.ready }

// connect dials NATS (unless a connection was supplied), binds the bucket
// and subscribes to the site's subject, retrying until it works or Close.
func (a *Agent) connect(ctx context.Context) bool {
	wait := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	for {
		err := a.connectOnce(ctx)
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		d := wait.Next()
		a.log.Warn("CONFIGSYNC: cannot reach NATS yet, retrying", "url", redactURLs(a.o.URL), "in", d, "err", err)
		select {
		case <-a.quit:
			return false
		case <-time.After(d):
		}
	}
}

func (a *Agent) connectOnce(ctx context.Context) error {
	if a.nc == nil {
		if a.o.Conn != nil {
			a.nc = a.o.Conn
		} else {
			// Connect itself waits while no server answers; bound each try
			// so the log shows the agent is still trying.
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			nc, err := Connect(cctx, a.o.URL, a.o.NATS, "metaq-configsync-agent-"+a.o.Site, a.o.Logger)
			cancel()
			if err != nil {
				return err
			}
			a.nc, a.ownsNC = nc, true
		}
	}
	if a.kv == nil {
		kv, err := openBucket(ctx, a.nc, a.o.NATS.Bucket)
		if err != nil {
			return err
		}
		a.kv = kv
	}
	// Subscribe before watching so no request can be missed between the two.
	sub, err := a.nc.Subscribe(siteSubject(a.o.NATS.Subject, a.o.Site), a.onRequest)
	if err != nil {
		return fmt.Errorf("configsync: agent: subscribe: %w", err)
	}
	a.sub = sub
	return nil
}

// Close stops watching, waits for an apply in progress to finish or be
// cancelled, and drains the connection if the agent opened it. It is safe to
// call more than once, and before Start.
func (a *Agent) Close() error {
	if !a.closing.CompareAndSwap(false, true) {
		return nil
	}
	close(a.quit)
	if !a.started.Load() {
		return nil
	}
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	a.closeConn()
	return nil
}

func (a *Agent) closeConn() {
	if a.ownsNC && a.nc != nil {
		// Drain lets an answer already published reach the pusher.
		if err := a.nc.Drain(); err != nil {
			a.nc.Close()
		}
	}
}

// run owns the watch and every apply.
func (a *Agent) run(ctx context.Context) {
	if !a.connect(ctx) {
		return
	}
	defer a.sub.Unsubscribe()
	a.recordState(ctx)
	a.mu.Lock()
	v := a.state.Version
	a.mu.Unlock()
	a.log.Info("CONFIGSYNC: agent started", "version", v, "bucket", a.o.NATS.Bucket,
		"subject", siteSubject(a.o.NATS.Subject, a.o.Site), "trustedKeys", len(a.trust.keys),
		"allowUnsigned", a.trust.allowUnsigned)
	a.warnTrust()
	close(a.ready)
	hb := time.NewTicker(a.o.HeartbeatInterval)
	defer hb.Stop()
	for {
		w, err := a.kv.Watch(ctx, keyDesired)
		if err != nil {
			a.log.Warn("CONFIGSYNC: watch failed, retrying", "err", err)
			select {
			case <-a.quit:
				return
			case <-time.After(time.Second):
				continue
			}
		}
		stopped := a.watchLoop(ctx, w, hb)
		_ = w.Stop()
		if stopped {
			return
		}
	}
}

// watchLoop handles one watcher until it ends; it returns true on Close.
func (a *Agent) watchLoop(ctx context.Context, w jetstream.KeyWatcher, hb *time.Ticker) bool {
	for {
		select {
		case <-a.quit:
			return true
		case e, ok := <-w.Updates():
			if !ok {
				return false // watcher ended (e.g. connection trouble): watch again
			}
			// A nil entry marks the end of the initial values: we are caught up.
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			a.handleEntry(ctx, e.Value())
		case <-a.kick:
			// A pusher asked about a version the watch has not delivered
			// yet; read it directly rather than wait.
			e, err := a.kv.Get(ctx, keyDesired)
			if err == nil {
				a.handleEntry(ctx, e.Value())
			}
		case <-hb.C:
			a.recordState(ctx)
		}
	}
}

func (a *Agent) handleEntry(ctx context.Context, value []byte) {
	v, err := decodeVersion(value)
	if err != nil {
		a.log.Error("CONFIGSYNC: bad desired entry", "err", err)
		return
	}
	a.mu.Lock()
	again := a.reapply.Version == v.Version && a.reapply.SHA256 == v.SHA256
	done := v.Version == a.processed && !again
	older := v.Version < a.processed
	processed, head := a.processed, a.head
	_, rejected := a.results[v.Version]
	tr := a.trust
	a.mu.Unlock()
	if done {
		a.answerWaiters()
		return
	}
	if older && a.staleEntry(ctx, processed) {
		// The watch delivers every update in order, and a pusher's
		// request made this agent read (and apply) a newer desired
		// version before the watch delivered this one: not a rewind.
		a.log.Debug("CONFIGSYNC: skipped an older desired version the watch delivered late", "version", v.Version, "applied", processed)
		a.answerWaiters()
		return
	}
	err = tr.check(v)
	if err == nil && older {
		err = fmt.Errorf("%w: version %d is older than version %d applied here; not applied (was the bucket's desired version set back?)",
			ErrNotSuccessor, v.Version, processed)
	}
	if err == nil && !again && head != "" && tr.verified(v) {
		err = a.checkSuccessor(ctx, v, processed, head, tr)
	}
	if err != nil {
		// Not applied, and not counted as processed: a forged entry with a
		// huge version number must not make the agent skip real pushes.
		res := a.reject(v, err, !rejected)
		a.mu.Lock()
		a.results[v.Version] = res
		for len(a.results) > maxParkedVersions { // forged versions must not grow memory
			delete(a.results, slices.Min(slices.Collect(maps.Keys(a.results))))
		}
		replies := a.waiters[v.Version]
		delete(a.waiters, v.Version)
		a.mu.Unlock()
		a.recordState(ctx)
		for _, r := range replies {
			a.respond(r, res)
		}
		return
	}
	res := a.apply(ctx, v)
	a.mu.Lock()
	a.processed, a.head, a.reapply = v.Version, v.Digest(), sidecar{}
	a.results[v.Version] = res
	for k := range a.results {
		if k+16 < v.Version {
			delete(a.results, k)
		}
	}
	a.mu.Unlock()
	a.recordState(ctx)
	a.answerWaiters()
}

// staleEntry says whether the bucket's desired version now is the one
// applied here (processed) or newer: an older entry is then a late update
// of the watch, not the desired version set back.
func (a *Agent) staleEntry(ctx context.Context, processed uint64) bool {
	e, err := a.kv.Get(ctx, keyDesired)
	if err != nil {
		return false
	}
	cur, err := decodeVersion(e.Value())
	return err == nil && cur.Version >= processed
}

// apply runs one version through validate, write and reload, and returns
// the result. On failure the previous file is back on disk.
func (a *Agent) apply(ctx context.Context, v *Version) Result {
	res := Result{Site: a.o.Site, Version: v.Version, SHA256: v.SHA256}
	fail := func(err error) Result {
		a.mu.Lock()
		a.state.Error = err.Error()
		a.state.FailedVersion = v.Version
		res.Running = a.state.Version
		res.PendingRestart = slices.Clone(a.state.PendingRestart)
		a.mu.Unlock()
		res.Error = err.Error()
		a.log.Error("CONFIGSYNC: apply failed, previous configuration kept", "version", v.Version, "err", err)
		return res
	}
	if err := v.Check(); err != nil {
		return fail(err)
	}
	old, err := os.ReadFile(a.o.ConfigPath)
	if err != nil {
		return fail(fmt.Errorf("configsync: read %s: %w", a.o.ConfigPath, err))
	}
	a.mu.Lock()
	prevVersion := a.state.Version
	a.mu.Unlock()
	if hashHex(old) == v.SHA256 {
		// Same bytes (e.g. the site was set up from the pushed file, or a
		// rollback to what it runs): nothing to write or reload.
		res.OK, res.Unchanged, res.Running = true, true, v.Version
		a.succeed(v, nil, &res)
		return res
	}
	var overlay []byte
	if a.o.OverlayPath != "" {
		if overlay, err = os.ReadFile(a.o.OverlayPath); err != nil {
			return fail(fmt.Errorf("configsync: overlay: %w", err))
		}
	}
	cfg, _, err := config.ParseWithOverlay(a.o.ConfigPath, v.Data, a.o.OverlayPath, overlay)
	if err != nil {
		return fail(fmt.Errorf("configsync: validate version %d: %w", v.Version, err))
	}
	if cfg.Site.Name != "" && cfg.Site.Name != a.o.Running.Site.Name && a.o.Running.Site.Name == a.o.Site {
		return fail(fmt.Errorf("configsync: version %d would rename site %q to %q: set [site] name in the site's overlay",
			v.Version, a.o.Running.Site.Name, cfg.Site.Name))
	}
	if keys := hostKeysReplaced(old, v.Data, overlay); len(keys) > 0 {
		return fail(fmt.Errorf("%w: version %d would replace this host's own %s, which its server.ini sets and its overlay does not: "+
			"move them to the site's overlay, which no push writes", ErrHostKeys, v.Version, strings.Join(keys, ", ")))
	}
	if tc, ok := a.o.Reloader.(TopicCounter); ok && !v.AllowTopicRemoval {
		counts := tc.TopicMessages()
		if removed := nonEmptyRemoved(counts, cfg); len(removed) > 0 {
			parts := make([]string, len(removed))
			for i, t := range removed {
				parts[i] = fmt.Sprintf("%s (%d messages)", t, counts[t])
			}
			return fail(fmt.Errorf("%w: version %d removes %s; push it with -allow-topic-removal to remove them anyway",
				ErrTopicRemoval, v.Version, strings.Join(parts, ", ")))
		}
	}
	backup := a.o.ConfigPath + ".prev"
	if prevVersion > 0 {
		backup = a.o.ConfigPath + ".v" + strconv.FormatUint(prevVersion, 10)
	}
	if err := atomicfile.WriteFile(backup, old, 0o644); err != nil {
		return fail(fmt.Errorf("configsync: keep previous version: %w", err))
	}
	if err := atomicfile.WriteFile(a.o.ConfigPath, v.Data, 0o644); err != nil {
		return fail(fmt.Errorf("configsync: write version %d: %w", v.Version, err))
	}
	rctx, cancel := context.WithTimeout(ctx, a.o.ReloadTimeout)
	changes, err := a.o.Reloader.Reload(rctx, cfg)
	cancel()
	if err != nil {
		if rerr := atomicfile.WriteFile(a.o.ConfigPath, old, 0o644); rerr != nil {
			err = errors.Join(err, fmt.Errorf("restore previous file: %w", rerr))
		}
		return fail(fmt.Errorf("configsync: reload version %d: %w", v.Version, err))
	}
	res.OK, res.Running = true, v.Version
	res.TopicsAdded, res.TopicsChanged, res.TopicsRemoved = changes.TopicsAdded, changes.TopicsChanged, changes.TopicsRemoved
	res.RestartKeys = changes.RestartKeys
	a.succeed(v, cfg, &res)
	a.pruneBackups()
	return res
}

// maxChainWalk bounds the signed versions an agent reads from the bucket
// to link a new version to the one it applied (the versions pushed while
// it was away).
const maxChainWalk = 1000

// checkSuccessor reports whether v is a signed successor of version
// processed, whose Digest is head: its Prev is head, or the Digest of
// version v-1 from the bucket, signed by a key tr trusts, which is itself
// a successor, and so on.
func (a *Agent) checkSuccessor(ctx context.Context, v *Version, processed uint64, head string, tr trust) error {
	notSuccessor := func(why string) error {
		return fmt.Errorf("%w: version %d does not follow version %d applied here: %s; not applied (was the bucket's desired version set back or forged?)",
			ErrNotSuccessor, v.Version, processed, why)
	}
	cur := v
	for range maxChainWalk {
		switch {
		case cur.Prev == head && cur.Version == processed+1:
			return nil
		case cur.Prev == "":
			return notSuccessor(fmt.Sprintf("version %d starts a chain of its own", cur.Version))
		case cur.Version <= processed+1:
			return notSuccessor(fmt.Sprintf("version %d names a predecessor other than version %d", cur.Version, processed))
		}
		e, err := a.kv.Get(ctx, versionKey(cur.Version-1))
		if err != nil {
			return notSuccessor(fmt.Sprintf("its predecessor version %d cannot be read from the bucket (%v)", cur.Version-1, err))
		}
		prev, err := decodeVersion(e.Value())
		if err != nil {
			return notSuccessor(err.Error())
		}
		if err := prev.Verify(tr.keys); err != nil {
			return notSuccessor(fmt.Sprintf("its predecessor in the bucket: %v", err))
		}
		if prev.Version != cur.Version-1 || prev.Digest() != cur.Prev {
			return notSuccessor(fmt.Sprintf("the bucket's version %d is not the one version %d was signed on top of", cur.Version-1, cur.Version))
		}
		cur = prev
	}
	return notSuccessor(fmt.Sprintf("more than %d versions apart", maxChainWalk))
}

// reject records that v was refused without being applied; the site keeps
// running what it runs. It logs only the first time.
func (a *Agent) reject(v *Version, err error, log bool) Result {
	a.mu.Lock()
	a.state.Error = err.Error()
	a.state.FailedVersion = v.Version
	res := Result{Site: a.o.Site, Version: v.Version, SHA256: v.SHA256, Running: a.state.Version, Error: err.Error(),
		PendingRestart: slices.Clone(a.state.PendingRestart)}
	a.mu.Unlock()
	if log {
		a.log.Error("CONFIGSYNC: version rejected, previous configuration kept", "version", v.Version, "err", err)
	}
	return res
}

// warnTrust says, at start, what this site will do with pushes that are not
// signed by a key it trusts, and whether its NATS link leaves the host in
// the clear.
func (a *Agent) warnTrust() {
	if a.o.Conn == nil && insecureNATSLink(a.o.URL, a.o.NATS) {
		a.log.Warn("CONFIGSYNC: INSECURE NATS LINK: the link to NATS leaves this host with neither TLS nor credentials; "+
			"set [nats] tlsCA (and a tls:// url) and credsFile", "url", redactURLs(a.o.URL))
	}
	switch {
	case a.trust.allowUnsigned:
		a.log.Warn("CONFIGSYNC: INSECURE: [nats] allowUnsigned=true: anyone who can write to the NATS bucket can change this site's configuration; " +
			"list the pushers' public keys in [nats] trustedKeys and remove allowUnsigned")
	case len(a.trust.keys) == 0:
		a.log.Warn("CONFIGSYNC: no [nats] trustedKeys: every pushed version will be refused; " +
			"run `configsync keygen` and list the public key in this site's overlay")
	}
}

// succeed records a successful apply of v; cfg is nil when the bytes were
// already on disk.
func (a *Agent) succeed(v *Version, cfg *config.Server, res *Result) {
	var pending []string
	if cfg != nil {
		pending = config.Diff(a.o.Running, cfg).RestartKeys
	}
	var tr *trust
	if cfg != nil {
		// The version's own [nats] trust settings (with the overlay) govern
		// the next push: a signed push can rotate keys.
		if t, err := trustOf(cfg.NATS); err == nil {
			tr = &t
		}
	}
	now := time.Now().UTC()
	a.mu.Lock()
	if cfg != nil {
		a.state.PendingRestart = pending
	}
	if tr != nil {
		a.trust = *tr
	}
	a.state.Version = v.Version
	a.state.SHA256 = v.SHA256
	a.state.AppliedAt = now
	a.state.Error, a.state.FailedVersion = "", 0
	res.PendingRestart = slices.Clone(a.state.PendingRestart)
	a.mu.Unlock()
	if err := a.writeSidecar(sidecar{Version: v.Version, SHA256: v.SHA256, AppliedAt: now, Digest: v.Digest()}); err != nil {
		a.log.Warn("CONFIGSYNC: cannot record applied version on disk", "err", err)
	}
	a.log.Info("CONFIGSYNC: version applied", "version", v.Version, "sha256", v.SHA256[:12],
		"changes", res.Changes().String(),
		"pendingRestart", res.PendingRestart)
}

// recordState writes site.<name> with a fresh heartbeat.
func (a *Agent) recordState(ctx context.Context) {
	var counts map[string]int64
	if tc, ok := a.o.Reloader.(TopicCounter); ok {
		counts = tc.TopicMessages()
	}
	overlayKeys, overlay := overlayOf(a.o.OverlayPath)
	running, _ := os.ReadFile(a.o.ConfigPath)
	a.mu.Lock()
	a.state.Running = ""
	if a.state.Version == 0 && running != nil {
		a.state.Running = string(PublicOverlay(running))
	}
	a.state.Heartbeat = time.Now().UTC()
	a.state.TopicMessages = counts
	a.state.OverlayKeys, a.state.Overlay = overlayKeys, string(overlay)
	b, err := json.Marshal(a.state)
	a.mu.Unlock()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.kv.Put(ctx, siteKey(a.o.Site), b); err != nil && !a.closing.Load() {
		a.log.Warn("CONFIGSYNC: cannot record site state", "err", err)
	}
}

// onRequest answers a pusher. It never blocks the NATS dispatcher: a
// request for a version not processed yet is parked until it is.
func (a *Agent) onRequest(m *nats.Msg) {
	var req request
	if err := json.Unmarshal(m.Data, &req); err != nil || m.Reply == "" {
		return
	}
	if req.Topics {
		res := Result{Site: a.o.Site, TopicMessages: map[string]int64{}}
		if tc, ok := a.o.Reloader.(TopicCounter); ok {
			res.TopicMessages = tc.TopicMessages()
		}
		a.respond(m.Reply, res)
		return
	}
	a.mu.Lock()
	// A refusal of a version not processed is not a final answer: the
	// bucket may hold a genuine version of that number by now (pushed over
	// a forged one), so it is read again below.
	if res, ok := a.results[req.Version]; (ok && res.OK) || req.Version <= a.processed {
		if !ok {
			res = a.resultForLocked(req.Version)
		}
		a.mu.Unlock()
		a.respond(m.Reply, res)
		return
	}
	// Requests for versions the bucket does not hold (yet) are parked; cap
	// them so a stream of bogus requests cannot grow memory without bound.
	// A pusher re-sends every second, so a dropped request is asked again.
	if len(a.waiters) >= maxParkedVersions && a.waiters[req.Version] == nil {
		a.mu.Unlock()
		return
	}
	if !slices.Contains(a.waiters[req.Version], m.Reply) && len(a.waiters[req.Version]) < maxParkedVersions {
		a.waiters[req.Version] = append(a.waiters[req.Version], m.Reply)
	}
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// resultForLocked returns the result for version v, or, when v was skipped
// because a newer version arrived first, the newest result.
func (a *Agent) resultForLocked(v uint64) Result {
	if r, ok := a.results[v]; ok {
		return r
	}
	if r, ok := a.results[a.processed]; ok {
		return r
	}
	// Processed before this process started (from the sidecar).
	return Result{Site: a.o.Site, Version: a.state.Version, Running: a.state.Version, OK: a.state.Error == "",
		Error: a.state.Error, Unchanged: true, PendingRestart: slices.Clone(a.state.PendingRestart)}
}

func (a *Agent) answerWaiters() {
	type answer struct {
		reply string
		res   Result
	}
	var out []answer
	a.mu.Lock()
	for v, replies := range a.waiters {
		if v > a.processed {
			continue
		}
		res := a.resultForLocked(v)
		for _, r := range replies {
			out = append(out, answer{r, res})
		}
		delete(a.waiters, v)
	}
	a.mu.Unlock()
	for _, x := range out {
		a.respond(x.reply, x.res)
	}
}

func (a *Agent) respond(reply string, res Result) {
	b, err := json.Marshal(res)
	if err != nil {
		return
	}
	if err := a.nc.Publish(reply, b); err != nil {
		a.log.Warn("CONFIGSYNC: cannot answer pusher", "err", err)
	}
}

func (a *Agent) sidecarPath() string { return sidecarPath(a.o.ConfigPath) }

func sidecarPath(configPath string) string { return configPath + ".configsync" }

// AppliedHere reports whether data, the bytes of configPath, are the version
// an agent last applied to that file: a file its pusher validated, and
// chose to publish (with unknown keys, when it holds some).
func AppliedHere(configPath string, data []byte) bool {
	b, err := os.ReadFile(sidecarPath(configPath))
	if err != nil {
		return false
	}
	var sc sidecar
	if json.Unmarshal(b, &sc) != nil || sc.Version == 0 {
		return false
	}
	return sc.SHA256 == hashHex(data)
}

func (a *Agent) readSidecar() (sidecar, error) {
	var sc sidecar
	b, err := os.ReadFile(a.sidecarPath())
	if err != nil {
		return sc, err
	}
	return sc, json.Unmarshal(b, &sc)
}

func (a *Agent) writeSidecar(sc sidecar) error {
	b, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(a.sidecarPath(), b, 0o644); err != nil {
		return fmt.Errorf("configsync: write version record: %w", err)
	}
	return nil
}

// pruneBackups keeps the newest KeepVersions <ConfigPath>.v<N> files.
func (a *Agent) pruneBackups() {
	dir, base := filepath.Dir(a.o.ConfigPath), filepath.Base(a.o.ConfigPath)+".v"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var vs []uint64
	for _, e := range ents {
		if n, ok := strings.CutPrefix(e.Name(), base); ok {
			if v, err := strconv.ParseUint(n, 10, 64); err == nil {
				vs = append(vs, v)
			}
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
	for _, v := range vs[min(len(vs), a.o.KeepVersions):] {
		_ = os.Remove(filepath.Join(dir, base+strconv.FormatUint(v, 10)))
	}
}
