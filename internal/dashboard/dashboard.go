// Package dashboard serves a bundle's web dashboard, its JSON API and the
// Prometheus /metrics endpoint on dashboardHttpPort.
//
// It knows nothing of the broker or the replicator: the bundle hands it a
// Source that returns a Snapshot of plain values, its replication lag as
// topology's lag reports (the project's one model of lag). The dashboard
// samples the lag of every snapshot into a bounded history so the page can
// chart lag over time.
//
// The listener is loopback unless the operator configures an address; any
// other address requires a token, sent as `Authorization: Bearer <token>`,
// or, for a browser, typed once into the sign-in form (POST /login, token in
// the body, at most a few attempts per client address and then one per two
// seconds), which sets an HttpOnly, SameSite cookie holding a random session
// id the server maps to its expiry (never the token). A token in the URL
// (?token=) is refused: URLs end up in access logs, proxies and history.
package dashboard

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/config"
	"metaq/topology"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Snapshot is what the dashboard shows about one site bundle at one moment.
type Snapshot struct {
	Site      string            `json:"site"`
	Role      string            `json:"role"` // master or slave
	BrokerID  int               `json:"brokerId"`
	ServeURL  string            `json:"serveUrl"`
	Time      time.Time         `json:"time"`
	Health    []HealthItem      `json:"health"`
	Topics    []Topic           `json:"topics"`
	Producers []Client          `json:"producers"`
	Consumers []Client          `json:"consumers"`
	Lag       []topology.Report `json:"lag"`
	Sites     []Site            `json:"sites"`
	Config    ConfigInfo        `json:"config"`
	// Gateway is the bundle's write gateway, when it has one.
	Gateway *topology.GatewayReport `json:"gateway,omitempty"`
	Extra   map[string]any          `json:"extra,omitempty"`
}

// HealthItem is one component's health; Err is "" when healthy.
type HealthItem struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Err  string `json:"err,omitempty"`
}

// Topic is one topic's partitions on this bundle.
type Topic struct {
	Name       string      `json:"name"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition's bounds.
type Partition struct {
	Partition int   `json:"partition"`
	Min       int64 `json:"min"`
	Max       int64 `json:"max"`
	Bytes     int64 `json:"bytes"`
	Messages  int64 `json:"messages"`
}

// Client is a producer connection or a consumer group seen by the broker.
type Client struct {
	Name   string `json:"name"` // remote address, or consumer group
	Topics string `json:"topics,omitempty"`
	Count  int64  `json:"count"` // puts or gets served
}

// Site is one member of the gossip pool.
type Site struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	Addr  string `json:"addr"`
	State string `json:"state"` // up, suspect, down
}

// ConfigInfo is the configuration version this site runs.
type ConfigInfo struct {
	Version        uint64 `json:"version"`
	SHA256         string `json:"sha256"`
	PendingRestart bool   `json:"pendingRestart"`
}

// Source returns the current snapshot. It must be safe for concurrent use
// and return quickly.
type Source interface {
	Snapshot(ctx context.Context) Snapshot
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) Snapshot

// Snapshot calls f.
func (f SourceFunc) Snapshot(ctx context.Context) Snapshot { return f(ctx) }

// Options configure a Server.
type Options struct {
	// Addr is the listen address; "" = 127.0.0.1:8120.
	Addr string
	// Token is required when Addr is not a loopback address.
	Token  string
	Source Source
	// Registry holds the Prometheus collectors served on /metrics; nil = a
	// new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// SampleEvery is how often lag is sampled for the chart; default 5s.
	SampleEvery time.Duration
	// HistoryLen is how many samples are kept; default 720 (an hour at 5s).
	HistoryLen int
	// Extra lets the bundle mount more handlers (e.g. /lag from topology).
	Extra  map[string]http.Handler
	Logger *slog.Logger
}

// LagSample is the lag of every row at one moment.
type LagSample struct {
	Time time.Time         `json:"time"`
	Rows []topology.Report `json:"rows"`
}

// Server is the dashboard HTTP server.
type Server struct {
	opts     Options
	log      *slog.Logger
	ln       net.Listener
	srv      *http.Server
	sampleMu sync.Mutex // serialises Sample
	mu       sync.Mutex // guards history and masters
	history  []LagSample
	masters  string // the masters the history's rows come from (mastersOf)
	closing  atomic.Bool
	quit     chan struct{}
	wg       sync.WaitGroup
	sessions sessions    // browsers signed in at /login
	logins   loginLimits // sign-in attempts per client address
}

//go:embed index.html
var indexHTML []byte

// New validates opts. Start listens.
func New(opts Options) (*Server, error) {
	if opts.Source == nil {
		return nil, errors.New("dashboard: Source is required")
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:8120"
	}
	if !config.IsLoopbackAddr(opts.Addr) && opts.Token == "" {
		return nil, fmt.Errorf("dashboard: listen address %s is not loopback: set [site] token", opts.Addr)
	}
	if opts.SampleEvery <= 0 {
		opts.SampleEvery = 5 * time.Second
	}
	if opts.HistoryLen <= 0 {
		opts.HistoryLen = 720
	}
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
		opts.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Server{opts: opts, log: opts.Logger.With("component", "dashboard"), quit: make(chan struct{})}, nil
}

// Handler returns the dashboard's routes, wrapped in the token check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(indexHTML)
	})
	mux.HandleFunc("GET /api/snapshot", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.opts.Source.Snapshot(r.Context()))
	})
	mux.HandleFunc("GET /api/lag/history", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.History())
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		snap := s.opts.Source.Snapshot(r.Context())
		for _, h := range snap.Health {
			if !h.OK {
				w.WriteHeader(http.StatusServiceUnavailable)
				writeJSON(w, snap.Health)
				return
			}
		}
		writeJSON(w, snap.Health)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{}))
	for p, h := range s.opts.Extra {
		mux.Handle(p, h)
	}
	if s.opts.Token == "" {
		return mux
	}
	return s.requireToken(mux)
}

func (s *Server) requireToken(next http.Handler) http.Handler {
	want := []byte(s.opts.Token)
	ok := func(got string) bool { return got != "" && subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); len(h) > 7 && ok(h[7:]) && h[:7] == "Bearer " {
			next.ServeHTTP(w, r)
			return
		}
		if c, err := r.Cookie(sessionCookie); err == nil && s.sessions.valid(c.Value, time.Now()) {
			next.ServeHTTP(w, r)
			return
		}
		if r.URL.Path == "/login" {
			s.login(w, r, ok)
			return
		}
		if r.URL.Query().Has("token") {
			http.Error(w, "dashboard: a token in the URL is not accepted (URLs end up in logs and history); "+
				"send Authorization: Bearer <token>, or sign in at /login", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/" {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		http.Error(w, "dashboard: a token is required (Authorization: Bearer <token>, or sign in at /login)", http.StatusUnauthorized)
	})
}

// loginForm asks a browser for the token once; the token travels in a POST
// body, never in a URL.
const loginForm = `<!doctype html><meta charset="utf-8"><title>MetaQ dashboard</title>
<form method="post" action="/login"><label>Token <input type="password" name="token" autofocus></label>
<button>Sign in</button></form>`

func (s *Server) login(w http.ResponseWriter, r *http.Request, ok func(string) bool) {
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, loginForm)
	case http.MethodPost:
		if allowed, wait := s.logins.allow(r, time.Now()); !allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
			http.Error(w, "dashboard: too many sign-in attempts from this address; try again later", http.StatusTooManyRequests)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4096)
		if err := r.ParseForm(); err != nil || !ok(r.PostForm.Get("token")) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "<p>Wrong token.</p>"+loginForm)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.sessions.create(time.Now()), HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, Path: "/", MaxAge: int(sessionTTL / time.Second)})
		http.Redirect(w, r, "/", http.StatusSeeOther)
	default:
		http.Error(w, "dashboard: GET or POST /login", http.StatusMethodNotAllowed)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Start listens and serves until Close.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "err", err)
		}
	}()
	go s.sampleLoop()
	s.log.Info("dashboard listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the bound address (after Start).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Sample records the current lag rows into the history (the sample loop
// calls it; tests call it directly).
func (s *Server) Sample(ctx context.Context) {
	// One sample at a time, so history stays in the order taken.
	s.sampleMu.Lock()
	defer s.sampleMu.Unlock()
	snap := s.opts.Source.Snapshot(ctx)
	t := snap.Time
	if t.IsZero() {
		t = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The chart follows the current master of each broker id: once another
	// site is master (a failover), the old master's slave groups are gone
	// and their last figures (down, minutes behind) would only stretch the
	// axis, so the history starts again.
	if m := mastersOf(snap.Lag); m != s.masters {
		if len(s.history) > 0 {
			s.log.Info("DASHBOARD: the master changed; the lag history starts again", "was", s.masters, "now", m)
		}
		s.history, s.masters = s.history[:0], m
	}
	s.history = append(s.history, LagSample{Time: t, Rows: snap.Lag})
	if over := len(s.history) - s.opts.HistoryLen; over > 0 {
		s.history = append(s.history[:0], s.history[over:]...)
	}
}

// mastersOf names the master site reporting each broker id's rows, e.g.
// "0=hf 1=bj"; rows no master reports (a slave not connected) are left out.
func mastersOf(rows []topology.Report) string {
	by := map[int]string{}
	for _, r := range rows {
		if r.MasterSite != "" {
			by[r.BrokerID] = r.MasterSite
		}
	}
	ids := make([]int, 0, len(by))
	for id := range by {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=%s", id, by[id])
	}
	return b.String()
}

// History returns a copy of the lag samples, oldest first.
func (s *Server) History() []LagSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]LagSample(nil), s.history...)
}

func (s *Server) sampleLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.SampleEvery)
	defer t.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Sample(ctx)
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
			s.Sample(ctx)
		}
	}
}

// Close stops the server. Idempotent.
func (s *Server) Close() error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	close(s.quit)
	var err error
	if s.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.srv.Shutdown(ctx)
		cancel()
	}
	s.wg.Wait()
	return err
}
