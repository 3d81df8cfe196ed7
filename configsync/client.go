package configsync

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"metaq/broker/config"
)

// ClientOptions configures a Client (the pushing side).
type ClientOptions struct {
	// URL of the NATS server. Default NATS.URL.
	URL string
	// NATS holds the bucket, subject prefix, credentials file and TLS files.
	// Bucket defaults to "metaq_config", Subject to "metaq.config".
	NATS config.NATS
	// Conn is an existing connection to use instead of dialling URL; the
	// client does not close it.
	Conn *nats.Conn
	// Logger receives connection events. Nil discards.
	Logger *slog.Logger
	// SigningKey signs every version this client publishes (see sign.go).
	// Required to publish unless AllowUnsigned.
	SigningKey ed25519.PrivateKey
	// AllowUnsigned lets Push and Rollback publish without a signing key,
	// for sites that set [nats] allowUnsigned=true.
	AllowUnsigned bool
	// TrustedKeys are the keys, besides SigningKey's own, whose versions
	// Rollback may republish. Default: parsed from NATS.TrustedKeys.
	TrustedKeys []ed25519.PublicKey
}

// Client publishes versions and reads site state.
type Client struct {
	nc      *nats.Conn
	ownsNC  bool
	kv      jetstream.KeyValue
	subject string
	host    string

	key           ed25519.PrivateKey
	allowUnsigned bool
	trusted       []ed25519.PublicKey
}

// ErrSecretInFile: the file to push sets a secret key ([site] token,
// [gossip] key).
var ErrSecretInFile = errors.New("configsync: secret in the shared file")

// ErrNoSigningKey: Push or Rollback without a signing key.
var ErrNoSigningKey = errors.New("configsync: no signing key: pass -key FILE (made by `configsync keygen`), " +
	"or -unsigned for sites that set [nats] allowUnsigned=true")

// NewClient connects and binds to (or creates) the bucket.
func NewClient(ctx context.Context, o ClientOptions) (*Client, error) {
	o.NATS.Bucket = bucketName(o.NATS)
	o.NATS.Subject = subjectPrefix(o.NATS)
	if o.URL == "" {
		o.URL = o.NATS.URL
	}
	c := &Client{nc: o.Conn, subject: o.NATS.Subject, key: o.SigningKey, allowUnsigned: o.AllowUnsigned,
		trusted: slices.Clone(o.TrustedKeys)}
	if c.trusted == nil {
		keys, err := config.ParseTrustedKeys(o.NATS.TrustedKeys)
		if err != nil {
			return nil, fmt.Errorf("configsync: client: [nats] trustedKeys: %w", err)
		}
		c.trusted = keys
	}
	if c.key != nil {
		c.trusted = append(c.trusted, c.key.Public().(ed25519.PublicKey))
	}
	c.host, _ = os.Hostname()
	if c.nc == nil {
		if o.URL == "" {
			return nil, errors.New("configsync: client: no NATS URL")
		}
		nc, err := Connect(ctx, o.URL, o.NATS, "metaq-configsync", o.Logger)
		if err != nil {
			return nil, err
		}
		c.nc, c.ownsNC = nc, true
	}
	kv, err := openBucket(ctx, c.nc, o.NATS.Bucket)
	if err != nil {
		c.Close()
		return nil, err
	}
	c.kv = kv
	return c, nil
}

// Close drains the connection when the client opened it.
func (c *Client) Close() {
	if c.ownsNC && c.nc != nil {
		if err := c.nc.Drain(); err != nil {
			c.nc.Close()
		}
	}
}

// ParseShared parses a shared server.ini without its overlay; when the file
// sets no brokerId (the sites' overlays do), it is read with brokerId 0.
func ParseShared(file string, data []byte) (*config.Server, []config.Warning, error) {
	cfg, warns, err := config.Parse(file, data)
	if err == nil || slices.Contains(OverlayKeys(data), "system.brokerId") {
		return cfg, warns, err
	}
	return config.ParseWithOverlay(file, data, "(brokerId left to the sites' overlays)", []byte("[system]\nbrokerId=0\n"))
}

// Validate parses data with the broker's own loader, so push rejects exactly
// what a broker would refuse to start with.
//
// A shared file may leave brokerId to each site's overlay (deploy/'s layout):
// it is then checked with a stand-in brokerId, and each agent checks it
// again with its real overlay before applying it.
func Validate(file string, data []byte) (*config.Server, []config.Warning, error) {
	cfg, warns, err := ParseShared(file, data)
	if err != nil {
		return nil, warns, fmt.Errorf("configsync: %s is invalid: %w", file, err)
	}
	return cfg, warns, nil
}

// PushOptions describes one push.
type PushOptions struct {
	File string // path, for messages and the record
	Data []byte // the file's exact bytes
	// Sites to wait for. Default: every site with a state entry in the
	// bucket.
	Sites []string
	// DryRun validates and computes the per-site diff, then stops.
	DryRun bool
	// Timeout bounds the wait for the sites' answers. Default 10s.
	Timeout time.Duration
	// OnPlan, when set, is called with the per-site diff before anything is
	// published.
	OnPlan func([]SitePlan)
	// AllowTopicRemoval publishes a version that removes topics still
	// holding messages at some site; without it Push refuses with
	// ErrTopicRemoval and names them with their message counts.
	AllowTopicRemoval bool
	// AllowUnknown publishes a file with keys or sections the loader does
	// not know; without it Push refuses with a *config.UnknownError (a
	// misspelt key silently loses its setting at every site).
	AllowUnknown bool

	rollbackOf uint64
}

// SitePlan is what a version would change on one site, computed from the
// version the site last reported.
type SitePlan struct {
	Site    string
	Running uint64 // version the site runs (0 = unknown or not from configsync)
	Changes config.Changes
	// Note explains a plan that could not be computed precisely.
	Note string
	// Shadowed lists the keys this version changes that the site's overlay
	// sets: they change nothing there and are left out of Changes.
	Shadowed []string
	// Diff is the line diff from what the site runs to the new file ("" when
	// they are the same bytes or what it runs is not known).
	Diff string
}

// withoutOverlaid splits keys into those the overlay does not set and those
// it does.
func withoutOverlaid(keys, overlay []string) (kept, shadowed []string) {
	for _, k := range keys {
		if slices.Contains(overlay, k) {
			shadowed = append(shadowed, k)
		} else {
			kept = append(kept, k)
		}
	}
	return kept, shadowed
}

// PushReport is the outcome of Push or Rollback.
type PushReport struct {
	Version    uint64 // version published (the existing one when Unchanged)
	Previous   uint64 // desired version before the push
	SHA256     string
	Unchanged  bool // the bytes equal the desired version: nothing published
	DryRun     bool
	RollbackOf uint64
	Warnings   []config.Warning
	Plans      []SitePlan
	Sites      []string          // expected sites, sorted
	Results    map[string]Result // answers by site
	Missing    []string          // sites that did not answer in time
}

// Failed lists sites that answered with an error or not at all.
func (r *PushReport) Failed() []string {
	var out []string
	for _, s := range r.Sites {
		if res, ok := r.Results[s]; !ok || !res.OK {
			out = append(out, s)
		}
	}
	return out
}

// Push validates o.Data, publishes it as the next version with a
// compare-and-set on the desired key and waits for the sites' answers. It
// returns ErrConflict when another push won, and ErrSitesFailed (with the
// report) when a site failed or did not answer.
func (c *Client) Push(ctx context.Context, o PushOptions) (*PushReport, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	newCfg, warns, err := Validate(o.File, o.Data)
	if err != nil {
		return nil, err
	}
	// A rollback republishes bytes that were published once already.
	if err := config.CheckUnknown(warns); err != nil && !o.AllowUnknown && o.rollbackOf == 0 {
		return nil, fmt.Errorf("configsync: %s: %w; nothing published (AllowUnknown publishes it anyway)", o.File, err)
	}
	// The bucket and every site would hold the secret: it belongs in each
	// site's overlay, which is never pushed.
	if keys := config.SecretKeysIn(o.Data); len(keys) > 0 {
		return nil, fmt.Errorf("%w: %s sets %s; a push would store it in NATS and copy it to every site: move it to each site's overlay (site.ini)",
			ErrSecretInFile, o.File, strings.Join(keys, ", "))
	}
	rep := &PushReport{SHA256: hashHex(o.Data), DryRun: o.DryRun, Warnings: warns, RollbackOf: o.rollbackOf,
		Results: map[string]Result{}}

	cur, rev, err := c.desired(ctx)
	if err != nil && !errors.Is(err, ErrNoDesired) {
		return nil, err
	}
	if cur != nil {
		rep.Previous = cur.Version
	}
	sites := o.Sites
	if len(sites) == 0 {
		if sites, err = c.knownSites(ctx); err != nil {
			return nil, err
		}
	}
	for _, s := range sites {
		if err := ValidSite(s); err != nil {
			return nil, err
		}
	}
	sites = slices.Compact(slices.Sorted(slices.Values(sites)))
	rep.Sites = sites
	rep.Plans = c.plan(ctx, sites, o.Data, newCfg)
	if o.OnPlan != nil {
		o.OnPlan(rep.Plans)
	}
	if !o.AllowTopicRemoval {
		if err := c.checkTopicRemoval(ctx, sites, newCfg); err != nil {
			return nil, err
		}
	}
	if o.DryRun {
		return rep, nil
	}
	if c.key == nil && !c.allowUnsigned {
		return nil, ErrNoSigningKey
	}

	// Listen for answers before publishing, so none can be lost.
	inbox := c.nc.NewInbox()
	answers := make(chan *nats.Msg, 1024)
	sub, err := c.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return nil, fmt.Errorf("configsync: subscribe %s: %w", inbox, err)
	}
	defer sub.Unsubscribe()

	// The version to publish on top of: the desired one when it is signed
	// by a key we trust and nothing says the bucket was set back.
	base, err := c.chainBase(ctx, cur, rev)
	if err != nil {
		return nil, err
	}
	// The same bytes need no new version, unless what the bucket holds is
	// not signed by a key we trust (a forged entry the sites refused).
	if cur != nil && cur == base && cur.SHA256 == rep.SHA256 && (cur.AllowTopicRemoval || !o.AllowTopicRemoval) &&
		(c.key == nil || cur.Verify(c.trusted) == nil) {
		// Same bytes: no new version; still collect every site's answer
		// about the current one so the operator sees where it stands.
		rep.Version, rep.Unchanged = cur.Version, true
	} else {
		v := &Version{Version: 1, SHA256: rep.SHA256, Data: o.Data, File: o.File,
			PushedAt: time.Now().UTC(), PushedBy: c.host, RollbackOf: o.rollbackOf, AllowTopicRemoval: o.AllowTopicRemoval}
		if base != nil {
			v.Version, v.Prev = base.Version+1, base.Digest()
		}
		if c.key != nil {
			v.Sign(c.key)
		}
		if err := c.publish(ctx, v, cur, rev); err != nil {
			return nil, err
		}
		rep.Version = v.Version
	}
	if len(sites) == 0 {
		return rep, nil
	}
	c.gather(ctx, rep, inbox, answers, o.Timeout)
	if len(rep.Failed()) > 0 {
		return rep, ErrSitesFailed
	}
	return rep, nil
}

// maxChainScan bounds the version.<N> entries, newest first, the pusher
// reads to find the newest one signed by a trusted key.
const maxChainScan = 64

// chainBase returns the version a push builds on (nil for the first one):
// the desired version cur when it is signed by a trusted key (any version,
// for an unsigned deployment), else the newest such version the bucket
// holds. It fails with ErrBucketRewound when a version signed by a trusted
// key, or a site's running version, is newer than that base (the desired
// key was set back), or when the base's number cannot grow.
func (c *Client) chainBase(ctx context.Context, cur *Version, rev uint64) (*Version, error) {
	base, err := c.chainBaseOf(ctx, cur)
	if errors.Is(err, ErrBucketRewound) {
		// A push that won meanwhile looks the same from here: say so.
		if _, now, derr := c.desired(ctx); derr == nil && now != rev {
			return nil, fmt.Errorf("%w: the desired version changed while this push read the bucket; nothing was published, re-run to push on top of it", ErrConflict)
		}
	}
	return base, err
}

func (c *Client) chainBaseOf(ctx context.Context, cur *Version) (*Version, error) {
	genuine := func(v *Version) bool {
		return v.Check() == nil && (len(c.trusted) == 0 || v.Verify(c.trusted) == nil)
	}
	newest, err := c.newestGenuine(ctx, genuine)
	if err != nil {
		return nil, err
	}
	base := newest
	if cur != nil && genuine(cur) {
		base = cur
	}
	baseNo := uint64(0)
	if base != nil {
		baseNo = base.Version
	}
	if newest != nil && newest.Version > baseNo {
		return nil, fmt.Errorf("%w: it holds version %d, but version %d, signed by a trusted key, was published after it; "+
			"someone who can write to the bucket set it back. Nothing published: find out who, then put version %d back as desired",
			ErrBucketRewound, baseNo, newest.Version, newest.Version)
	}
	sites, err := c.knownSites(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range slices.Sorted(slices.Values(sites)) {
		if st, err := c.siteState(ctx, s); err == nil && st.Version > baseNo {
			return nil, fmt.Errorf("%w: site %s runs version %d, but the newest version signed by a trusted key in the bucket is %d; "+
				"nothing published: find out who wrote to the bucket, and check the pusher's trusted keys",
				ErrBucketRewound, s, st.Version, baseNo)
		}
	}
	if baseNo == math.MaxUint64 {
		return nil, fmt.Errorf("%w: version %d has no successor number; nothing published", ErrBucketRewound, baseNo)
	}
	return base, nil
}

// newestGenuine returns the newest of the version.<N> entries that genuine
// accepts, looking at the maxChainScan newest ones, or nil.
func (c *Client) newestGenuine(ctx context.Context, genuine func(*Version) bool) (*Version, error) {
	l, err := c.kv.ListKeysFiltered(ctx, keyVersionPrefix+"*")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("configsync: list versions: %w", err)
	}
	var nums []uint64
	for k := range l.Keys() {
		if n, err := strconv.ParseUint(strings.TrimPrefix(k, keyVersionPrefix), 10, 64); err == nil {
			nums = append(nums, n)
		}
	}
	l.Stop()
	slices.Sort(nums)
	slices.Reverse(nums)
	for _, n := range nums[:min(len(nums), maxChainScan)] {
		e, err := c.kv.Get(ctx, versionKey(n))
		if err != nil {
			continue
		}
		if v, err := decodeVersion(e.Value()); err == nil && v.Version == n && genuine(v) {
			return v, nil
		}
	}
	return nil, nil
}

// publish writes v to desired with a compare-and-set on rev (create when
// cur is nil), then records it under version.<N>.
func (c *Client) publish(ctx context.Context, v *Version, cur *Version, rev uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("configsync: encode version: %w", err)
	}
	if cur == nil {
		_, err = c.kv.Create(ctx, keyDesired, b)
	} else {
		_, err = c.kv.Update(ctx, keyDesired, b, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			now := "unknown"
			if w, _, err := c.desired(ctx); err == nil {
				now = strconv.FormatUint(w.Version, 10)
			}
			return fmt.Errorf("%w: read version %d, the bucket now holds version %s; nothing was published, re-run to push on top of it",
				ErrConflict, v.Version-1, now)
		}
		return fmt.Errorf("configsync: publish version %d: %w", v.Version, err)
	}
	// The desired key is the source of truth; version.<N> is a copy for
	// rollback and diff, so losing it only costs history.
	if _, err := c.kv.Put(ctx, versionKey(v.Version), b); err != nil {
		return fmt.Errorf("configsync: version %d published, but recording its copy failed: %w", v.Version, err)
	}
	return nil
}

// gather sends the request to every expected site (again every second to
// those that have not answered) and collects answers until all answered or
// timeout passes.
func (c *Client) gather(ctx context.Context, rep *PushReport, inbox string, answers <-chan *nats.Msg, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, _ := json.Marshal(request{Version: rep.Version})
	pending := map[string]bool{}
	other := map[string]Result{} // answers about other bytes, by site
	for _, s := range rep.Sites {
		pending[s] = true
	}
	send := func() {
		for s := range pending {
			_ = c.nc.PublishRequest(siteSubject(c.subject, s), inbox, req)
		}
		_ = c.nc.Flush()
	}
	send()
	resend := time.NewTicker(time.Second)
	defer resend.Stop()
	for len(pending) > 0 {
		select {
		case <-ctx.Done():
			for s := range pending {
				if res, ok := other[s]; ok {
					rep.Results[s] = res
					continue
				}
				rep.Missing = append(rep.Missing, s)
			}
			sort.Strings(rep.Missing)
			return
		case <-resend.C:
			send()
		case m := <-answers:
			var res Result
			if err := json.Unmarshal(m.Data, &res); err != nil || !pending[res.Site] {
				continue
			}
			if res.Version > rep.Version && res.OK {
				res.Error = fmt.Sprintf("version %d was superseded by version %d before the site applied it", rep.Version, res.Version)
			}
			if res.Version == rep.Version && res.SHA256 != "" && res.SHA256 != rep.SHA256 {
				// An answer about other bytes under the same number (a
				// forged entry the site refused, or one applied before the
				// bucket was set back): not this push's outcome, whatever
				// it says. Wait for the real one.
				res.OK = false
				res.Error = fmt.Sprintf("the site answered only about other bytes numbered %d (sha256 %.12s, pushed %.12s): "+
					"the bucket's versions were set back or forged", rep.Version, res.SHA256, rep.SHA256)
				other[res.Site] = res
				continue
			}
			rep.Results[res.Site] = res
			delete(pending, res.Site)
		}
	}
}

// checkTopicRemoval returns ErrTopicRemoval, naming each topic and how many
// messages each site holds of it, when newCfg drops a topic that a site
// (an expected one or any the bucket knows) reported holding messages.
func (c *Client) checkTopicRemoval(ctx context.Context, sites []string, newCfg *config.Server) error {
	known, err := c.knownSites(ctx)
	if err != nil {
		return err
	}
	all := slices.Compact(slices.Sorted(slices.Values(append(known, sites...))))
	counts := c.topicCounts(ctx, all, 3*time.Second)
	held := map[string][]string{} // topic -> "<n> messages at <site>"
	for _, s := range all {
		tm, ok := counts[s]
		if !ok {
			// No live answer: what the site recorded with its last heartbeat.
			st, err := c.siteState(ctx, s)
			if err != nil {
				continue
			}
			tm = st.TopicMessages
		}
		for _, t := range nonEmptyRemoved(tm, newCfg) {
			held[t] = append(held[t], fmt.Sprintf("%d messages at %s", tm[t], s))
		}
	}
	if len(held) == 0 {
		return nil
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(held)) {
		parts = append(parts, fmt.Sprintf("%s holds %s", t, strings.Join(held[t], ", ")))
	}
	return fmt.Errorf("%w: %s; nothing was published: push again with -allow-topic-removal to remove them (their messages stay on disk until retention deletes them; puts to them are refused)",
		ErrTopicRemoval, strings.Join(parts, "; "))
}

// topicCounts asks every site's agent for its message count per topic and
// returns the answers that arrived within wait.
func (c *Client) topicCounts(ctx context.Context, sites []string, wait time.Duration) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	if len(sites) == 0 {
		return out
	}
	inbox := c.nc.NewInbox()
	answers := make(chan *nats.Msg, 64)
	sub, err := c.nc.ChanSubscribe(inbox, answers)
	if err != nil {
		return out
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(request{Topics: true})
	for _, s := range sites {
		_ = c.nc.PublishRequest(siteSubject(c.subject, s), inbox, req)
	}
	_ = c.nc.Flush()
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for len(out) < len(sites) {
		select {
		case <-ctx.Done():
			return out
		case m := <-answers:
			var res Result
			// A site with no topics (or no counts) answers with none: an
			// answer all the same, not a reason to wait out the timeout.
			if json.Unmarshal(m.Data, &res) == nil && slices.Contains(sites, res.Site) {
				out[res.Site] = res.TopicMessages
			}
		}
	}
	return out
}

// plan computes, per site, what the new configuration changes compared with
// the version the site last reported.
func (c *Client) plan(ctx context.Context, sites []string, newData []byte, newCfg *config.Server) []SitePlan {
	cache := map[uint64]*Version{}
	var plans []SitePlan
	for _, s := range sites {
		p := SitePlan{Site: s}
		st, err := c.siteState(ctx, s)
		switch {
		case err != nil:
			p.Note = "no state recorded (site never started an agent)"
		case st.Version == 0 && st.Running == "":
			p.Note = "runs a file not published by configsync (sha256 " + short(st.SHA256) + "; its agent does not report the file)"
		case st.Version == 0:
			// The agent reports the file (without secret lines): the preview
			// is against it.
			p.Note = "runs a file not published by configsync (sha256 " + short(st.SHA256) + "); changes against it:"
			old := &Version{File: s + "'s server.ini", Data: []byte(st.Running)}
			p.Changes = siteChanges(old, newData, newCfg, st)
			p.Changes.RestartKeys, p.Shadowed = withoutOverlaid(p.Changes.RestartKeys, st.OverlayKeys)
			p.Diff = DiffText(old.File, "new "+filepathBase(newCfg.File), old.Data, PublicOverlay(newData))
		default:
			p.Running = st.Version
			old, ok := cache[st.Version]
			if !ok {
				v, err := c.Version(ctx, st.Version)
				if err != nil {
					p.Note = fmt.Sprintf("cannot read version %d: %v", st.Version, err)
				}
				cache[st.Version] = v
				old = v
			}
			if old != nil {
				p.Changes = siteChanges(old, newData, newCfg, st)
				p.Changes.RestartKeys, p.Shadowed = withoutOverlaid(p.Changes.RestartKeys, st.OverlayKeys)
				p.Diff = DiffText(fmt.Sprintf("%s v%d", s, st.Version), "new "+filepathBase(newCfg.File), old.Data, newData)
			}
		}
		plans = append(plans, p)
	}
	return plans
}

// siteChanges is what going from version old to the new bytes changes on a
// site: both read with the public part of the site's overlay, as the site
// reads them, so keys the overlay sets (and the defaults derived from them,
// such as the listeners at serverPort+N) do not show up as changes.
func siteChanges(old *Version, newData []byte, newCfg *config.Server, st *SiteState) config.Changes {
	if st.Overlay != "" {
		oc, _, oerr := config.ParseWithOverlay(old.File, old.Data, "site overlay", []byte(st.Overlay))
		nc, _, nerr := config.ParseWithOverlay(old.File, newData, "site overlay", []byte(st.Overlay))
		if oerr == nil && nerr == nil {
			return config.Diff(oc, nc)
		}
	}
	oc, _, err := ParseShared(old.File, old.Data)
	if err != nil {
		return config.Changes{}
	}
	return config.Diff(oc, newCfg)
}

func filepathBase(p string) string {
	if p == "" {
		return "file"
	}
	return filepath.Base(p)
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// desired returns the desired version and its KV revision.
func (c *Client) desired(ctx context.Context) (*Version, uint64, error) {
	e, err := c.kv.Get(ctx, keyDesired)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, ErrNoDesired
	}
	if err != nil {
		return nil, 0, fmt.Errorf("configsync: read desired version: %w", err)
	}
	v, err := decodeVersion(e.Value())
	if err != nil {
		return nil, 0, err
	}
	return v, e.Revision(), nil
}

// Desired returns the version every site should run, or ErrNoDesired.
func (c *Client) Desired(ctx context.Context) (*Version, error) {
	v, _, err := c.desired(ctx)
	return v, err
}

// Version returns published version n from version.<n>, or from the history
// of the desired key when that copy is missing.
func (c *Client) Version(ctx context.Context, n uint64) (*Version, error) {
	e, err := c.kv.Get(ctx, versionKey(n))
	if err == nil {
		v, err := decodeVersion(e.Value())
		if err != nil {
			return nil, err
		}
		return v, v.Check()
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("configsync: read version %d: %w", n, err)
	}
	hist, err := c.kv.History(ctx, keyDesired)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("configsync: read history: %w", err)
	}
	for _, h := range hist {
		if v, err := decodeVersion(h.Value()); err == nil && v.Version == n {
			return v, v.Check()
		}
	}
	return nil, fmt.Errorf("%w: %d", ErrVersionNotFound, n)
}

func (c *Client) knownSites(ctx context.Context) ([]string, error) {
	l, err := c.kv.ListKeysFiltered(ctx, keySitePrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("configsync: list sites: %w", err)
	}
	defer l.Stop()
	var out []string
	for k := range l.Keys() {
		out = append(out, strings.TrimPrefix(k, keySitePrefix))
	}
	return out, nil
}

func (c *Client) siteState(ctx context.Context, site string) (*SiteState, error) {
	e, err := c.kv.Get(ctx, siteKey(site))
	if err != nil {
		return nil, err
	}
	return decodeSite(e.Value())
}

// Status is the desired version and every site's recorded state.
type Status struct {
	Desired *Version    `json:"desired,omitempty"` // Data left out
	Sites   []SiteState `json:"sites"`
}

// Status reads the desired version and the state of every site that ever
// ran an agent, including sites that are down now (their heartbeat is old).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	st := &Status{Sites: []SiteState{}}
	v, err := c.Desired(ctx)
	if err != nil && !errors.Is(err, ErrNoDesired) {
		return nil, err
	}
	if v != nil {
		v.Data = nil
		st.Desired = v
	}
	sites, err := c.knownSites(ctx)
	if err != nil {
		return nil, err
	}
	sort.Strings(sites)
	for _, s := range sites {
		ss, err := c.siteState(ctx, s)
		if err != nil {
			continue // removed between list and get
		}
		st.Sites = append(st.Sites, *ss)
	}
	return st, nil
}

// RollbackOptions describes a rollback.
type RollbackOptions struct {
	// To is the version whose bytes are republished. Default: the version
	// before the desired one.
	To      uint64
	Sites   []string
	DryRun  bool
	Timeout time.Duration
	OnPlan  func([]SitePlan)
	// AllowTopicRemoval: see PushOptions.
	AllowTopicRemoval bool
}

// Rollback publishes an older version's bytes as a new version (history is
// never rewritten) and waits for the sites like Push.
func (c *Client) Rollback(ctx context.Context, o RollbackOptions) (*PushReport, error) {
	cur, err := c.Desired(ctx)
	if err != nil {
		return nil, err
	}
	to := o.To
	if to == 0 {
		if cur.Version < 2 {
			return nil, fmt.Errorf("configsync: rollback: version %d has no predecessor", cur.Version)
		}
		to = cur.Version - 1
	}
	if to >= cur.Version {
		return nil, fmt.Errorf("configsync: rollback: version %d is not older than the desired version %d", to, cur.Version)
	}
	old, err := c.Version(ctx, to)
	if err != nil {
		return nil, fmt.Errorf("configsync: rollback: %w", err)
	}
	// Republishing signs the old bytes again: make sure they are what a
	// trusted pusher published, not something written into the bucket.
	if err := old.Verify(c.trusted); err != nil && !c.allowUnsigned {
		return nil, fmt.Errorf("configsync: rollback: refusing to republish version %d: %w", to, err)
	}
	return c.Push(ctx, PushOptions{File: old.File, Data: old.Data, Sites: o.Sites, DryRun: o.DryRun,
		Timeout: o.Timeout, OnPlan: o.OnPlan, AllowTopicRemoval: o.AllowTopicRemoval, rollbackOf: to})
}
