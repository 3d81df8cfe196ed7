package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
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
func (r *routeFlags) router(ctx context.Context, g *globals, cmd string) (*topology.RemoteRouter, client.ReadPreference, error) {
	rr, pref, err := r.start(ctx, g.stderr, g.verbose)
	if err != nil {
		return nil, pref, fmt.Errorf("%s: %w", cmd, err)
	}
	return rr, pref, nil
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
