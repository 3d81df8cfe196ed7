package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"metaq/broker/client"
	"metaq/topology"
)

// routeFlags pin consume and fetch to a site the way the Go client's router
// does: the partition is read from the site's replica while the pool shows
// it alive, healthy and within -max-lag, from the master otherwise. The pool
// is read from bundles' /lag documents (topology.RemoteRouter), own site
// first.
type routeFlags struct {
	site   string
	prefer string
	maxLag time.Duration
	lag    string
	token  string
}

func (r *routeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.site, "site", "", "this reader's site, e.g. hf (with -prefer local-first)")
	fs.StringVar(&r.prefer, "prefer", "master-only", "read preference: master-only, local-first, nearest-healthy")
	fs.DurationVar(&r.maxLag, "max-lag", 0, "largest replica lag accepted (0: the pool's lagging threshold)")
	fs.StringVar(&r.lag, "lag", os.Getenv("METAQ_LAG"),
		"bundles' dashboards to read site health from, own site first: host:port[,host:port] or full /lag URLs (default $METAQ_LAG)")
	fs.StringVar(&r.token, "token", os.Getenv("METAQ_TOKEN"), "dashboard token ([site] token), default $METAQ_TOKEN")
}

// router returns the started router and the preference, or a nil router for
// master-only, with errors naming the command. The caller closes the router.
// A -site that reads nothing there (master-only, or a site the pool does not
// know) is warned about on stderr.
func (r *routeFlags) router(ctx context.Context, g *globals, cmd string) (*topology.RemoteRouter, client.ReadPreference, error) {
	rr, pref, err := r.start(ctx, g.stderr, g.verbose)
	if err != nil {
		return nil, pref, fmt.Errorf("%s: %w", cmd, err)
	}
	switch {
	case r.site != "" && pref == client.MasterOnly:
		fmt.Fprintf(g.stderr, "metaq %s: warning: -site %s has no effect with -prefer master-only: every read goes to the master; add -prefer local-first -lag <dashboards> to read at %s\n",
			cmd, r.site, r.site)
	case r.site != "" && rr != nil:
		sites := rr.Sites()
		if _, ok := sites[r.site]; !ok && len(sites) > 0 {
			fmt.Fprintf(g.stderr, "metaq %s: warning: the pool has no site %q (it knows %s): reads go to the master or the nearest healthy replica\n",
				cmd, r.site, siteList(sites))
		}
	}
	return rr, pref, nil
}

// siteList formats sites and their states, sorted: "bj (alive), gz (down)".
func siteList(sites map[string]string) string {
	names := make([]string, 0, len(sites))
	for s := range sites {
		names = append(names, s)
	}
	sort.Strings(names)
	for i, s := range names {
		names[i] = s + " (" + sites[s] + ")"
	}
	return strings.Join(names, ", ")
}

// servedBy wraps the router to record, per partition, where the client was
// sent to read, so the command can say at the end which sites served it.
type servedBy struct {
	rr *topology.RemoteRouter // nil: master-only, the client's own choice

	mu    sync.Mutex
	where map[string]string // partition -> "hf (127.0.0.1:8133, local replica)"
}

func newServedBy(rr *topology.RemoteRouter) *servedBy {
	return &servedBy{rr: rr, where: map[string]string{}}
}

// Route implements client.Router.
func (s *servedBy) Route(ctx context.Context, req client.RouteRequest) (string, error) {
	part := fmt.Sprintf("%d-%d", req.BrokerID, req.Partition)
	d, err := s.rr.Decide(ctx, req)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.where[part] = "the master (no healthy replica in the pool's view)"
		return "", err
	}
	site := d.Site
	if site == "" {
		site = "?"
	}
	s.where[part] = fmt.Sprintf("%s (%s, %s)", site, d.Addr, d.Reason)
	return d.Addr, nil
}

// report prints which sites served the reads, grouping the partitions.
func (s *servedBy) report(w io.Writer, pref client.ReadPreference) {
	if s == nil || s.rr == nil {
		fmt.Fprintf(w, "reads served by: the master of each partition (-prefer %s)\n", pref)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.where) == 0 {
		fmt.Fprintln(w, "reads served by: no partition was read")
		return
	}
	byWhere := map[string][]string{}
	for part, where := range s.where {
		byWhere[where] = append(byWhere[where], part)
	}
	wheres := make([]string, 0, len(byWhere))
	for w := range byWhere {
		wheres = append(wheres, w)
	}
	sort.Strings(wheres)
	fmt.Fprintln(w, "reads served by:")
	for _, where := range wheres {
		parts := byWhere[where]
		sort.Strings(parts)
		fmt.Fprintf(w, "  %s: partitions %s\n", where, strings.Join(parts, ","))
	}
}

func (r *routeFlags) start(ctx context.Context, logw io.Writer, verbose bool) (*topology.RemoteRouter, client.ReadPreference, error) {
	pref, err := client.ParseReadPreference(r.prefer)
	if err != nil {
		return nil, pref, err
	}
	if pref == client.MasterOnly {
		return nil, pref, nil
	}
	if pref == client.LocalFirst && r.site == "" {
		return nil, pref, errors.New("-prefer local-first needs -site")
	}
	if r.lag == "" {
		return nil, pref, fmt.Errorf("-prefer %s needs -lag: the dashboards (dashboardHttpPort) of a bundle at %s and one at another site, to see which replicas are healthy",
			r.prefer, orAny(r.site))
	}
	var urls []string
	for u := range strings.SplitSeq(r.lag, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "http://" + u
		}
		if !strings.HasSuffix(u, "/lag") {
			u = strings.TrimRight(u, "/") + "/lag"
		}
		urls = append(urls, u)
	}
	log := slog.New(slog.DiscardHandler)
	if verbose {
		log = slog.New(slog.NewTextHandler(logw, nil))
	}
	rr, err := topology.NewRemoteRouter(topology.RemoteRouterOptions{URLs: urls, Token: r.token, Logger: log})
	if err != nil {
		return nil, pref, err
	}
	if err := rr.Start(ctx); err != nil {
		rr.Close()
		return nil, pref, fmt.Errorf("cannot read the pool's health: %w", err)
	}
	return rr, pref, nil
}

func orAny(site string) string {
	if site == "" {
		return "your site"
	}
	return site
}
