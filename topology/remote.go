package topology

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/client"
)

// RemoteRouterOptions configure a RemoteRouter.
type RemoteRouterOptions struct {
	// URLs are bundles' lag endpoints (http://host:dashboardHttpPort/lag),
	// tried in order: list the consumer's own site first and at least one
	// other site, so that routing keeps working when the own site is down.
	URLs []string
	// Token is sent as a bearer token ([site] token), "" for none.
	Token string
	// Interval is how often the pool view is fetched. Default 2s.
	Interval time.Duration
	// MaxAge is how old the last view may be before Route gives up and lets
	// the client fall back to its own choice. Default 3 × Interval.
	MaxAge time.Duration
	// SiteOrder ranks other sites by nearness (see RouteInput.SiteOrder).
	SiteOrder []string
	// HTTPClient is used for the requests; default one with a 5 s timeout.
	HTTPClient *http.Client
	// Logger receives state changes; nil discards.
	Logger *slog.Logger
}

// RemoteRouter implements broker/client's Router for consumers that are not
// members of the gossip pool: it polls a bundle's /lag document (which
// carries every member with its metadata and state) and applies Choose to
// it. Create it with NewRemoteRouter, Start it, Close it when done.
type RemoteRouter struct {
	o   RemoteRouterOptions
	log *slog.Logger

	mu      sync.RWMutex
	members []Member
	fetched time.Time
	source  string

	quit    chan struct{}
	wg      sync.WaitGroup
	started atomic.Bool
	closing atomic.Bool
}

var _ client.Router = (*RemoteRouter)(nil)

// NewRemoteRouter validates o and returns a router that has not fetched yet.
func NewRemoteRouter(o RemoteRouterOptions) (*RemoteRouter, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("topology: remote router needs at least one /lag URL")
	}
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 3 * o.Interval
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &RemoteRouter{o: o, log: o.Logger.With("component", "remote-router"), quit: make(chan struct{})}, nil
}

// Start fetches the pool view once (an error is returned but the poller
// keeps trying) and starts polling every Interval until Close.
func (r *RemoteRouter) Start(ctx context.Context) error {
	if r.closing.Load() {
		return ErrClosed
	}
	if !r.started.CompareAndSwap(false, true) {
		return errors.New("topology: remote router already started")
	}
	err := r.refresh(ctx)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tick := time.NewTicker(r.o.Interval)
		defer tick.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), r.o.Interval)
			if err := r.refresh(ctx); err != nil {
				r.log.Warn("TOPOLOGY: remote router cannot fetch the pool view", "err", err)
			}
			cancel()
		}
	}()
	return err
}

// Close stops polling; it is idempotent.
func (r *RemoteRouter) Close() error {
	if r.closing.CompareAndSwap(false, true) {
		close(r.quit)
		r.wg.Wait()
	}
	return nil
}

// refresh fetches the first URL that answers.
func (r *RemoteRouter) refresh(ctx context.Context) error {
	var errs []error
	for _, u := range r.o.URLs {
		doc, err := r.fetch(ctx, u)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.mu.Lock()
		if r.source != u {
			r.log.Info("TOPOLOGY: remote router reads the pool from "+u, "node", doc.Node)
		}
		r.members, r.fetched, r.source = doc.Members, time.Now(), u
		r.mu.Unlock()
		return nil
	}
	return fmt.Errorf("topology: remote router: %w", errors.Join(errs...))
}

func (r *RemoteRouter) fetch(ctx context.Context, u string) (LagDocument, error) {
	var doc LagDocument
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+sep+"consumers=0", nil)
	if err != nil {
		return doc, err
	}
	if r.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.o.Token)
	}
	resp, err := r.o.HTTPClient.Do(req)
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("%s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&doc); err != nil {
		return doc, fmt.Errorf("%s: %w", u, err)
	}
	return doc, nil
}

// Route answers from the last fetched view; client.ErrNoRoute when the view
// is older than MaxAge or knows no alive copy, so the client falls back to
// its own choice from ZooKeeper.
func (r *RemoteRouter) Route(ctx context.Context, req client.RouteRequest) (string, error) {
	d, err := r.Decide(ctx, req)
	if err != nil {
		return "", err
	}
	return d.Addr, nil
}

// Decide is Route with the whole decision: the site and the rule that chose
// the address, for a caller that reports where it reads.
func (r *RemoteRouter) Decide(ctx context.Context, req client.RouteRequest) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, err
	}
	r.mu.RLock()
	members, fetched := r.members, r.fetched
	r.mu.RUnlock()
	if fetched.IsZero() || time.Since(fetched) > r.o.MaxAge {
		return Decision{}, client.ErrNoRoute
	}
	d, ok := Choose(RouteInput{Site: req.Site, Preference: req.Preference, MaxLag: req.MaxLag,
		SiteOrder: r.o.SiteOrder, Replicas: withClientMaster(replicasOf(members, req.BrokerID), req.Replicas)})
	if !ok {
		return Decision{}, client.ErrNoRoute
	}
	return d, nil
}

// Sites maps each site of the members in the last fetched view to its
// state: "alive" when one of its members is, else a member's state.
func (r *RemoteRouter) Sites() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := map[string]string{}
	for _, m := range r.members {
		if m.Meta.Site == "" {
			continue
		}
		if st := m.State.String(); out[m.Meta.Site] != "alive" {
			out[m.Meta.Site] = st
		}
	}
	return out
}
