package bundle

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/internal/unixsock"
)

// Admin is the bundle's admin HTTP endpoint, which replaces MetaQ's JMX
// operations (see metaServer.sh in broker/wire/doc.go). It listens on the
// unix socket <dataPath>/admin.sock (mode 0660: the broker's user and group),
// which takes no port, so brokers started from MetaQ's files on adjacent
// ports (its slave layout: 8111, 8112, 8113) run side by side; and also on
// TCP when [site] adminAddr (or Options.AdminAddr) gives an address. With a
// non-loopback address the [site] token is required; when a token is set it
// is required in every request, on either listener ("Authorization: Bearer
// <token>").
//
//	GET  /status                                  bundle status (JSON)
//	GET  /stats?item=X                            the body of `stats X`
//	POST /reload                                  re-read server.ini (JSON changes)
//	POST /close-partitions?topic=T&start=a&end=b  answer 403 on those partitions
//	POST /open-partitions?topic=T[&start=a&end=b] reopen them (all when no range)
//	GET  /slave-status                            async-slave replication status (JSON)
//	POST /promote[?force=true]                    make this slave site master (JSON report)
//	POST /switchover?to=<slave>                   hand mastership to a caught-up slave (JSON report)
type Admin struct {
	b     *Bundle
	ln    net.Listener // TCP; nil without an address
	sock  *unixsock.Listener
	srv   *http.Server
	mux   *http.ServeMux
	token string
	log   *slog.Logger
	wg    sync.WaitGroup
	once  sync.Once
}

// startAdmin serves the endpoint on the unix socket sock and, when addr is
// not "", on TCP at addr.
func startAdmin(b *Bundle, sock, addr, token string) (a *Admin, err error) {
	if addr != "" && !config.IsLoopbackAddr(addr) && token == "" {
		return nil, fmt.Errorf("bundle: admin address %s is not loopback: set [site] token", addr)
	}
	a = &Admin{b: b, mux: http.NewServeMux(), token: token, log: b.log.With("component", "admin")}
	a.sock, err = unixsock.Listen(sock, 0o660)
	if err != nil {
		return nil, fmt.Errorf("bundle: admin socket: %w", err)
	}
	if addr != "" {
		if a.ln, err = net.Listen("tcp", addr); err != nil {
			a.sock.Close()
			return nil, fmt.Errorf("bundle: admin listen %s: %w", addr, err)
		}
	}
	a.mux.HandleFunc("GET /status", a.status)
	a.mux.HandleFunc("GET /stats", a.stats)
	a.mux.HandleFunc("POST /reload", a.reload)
	a.mux.HandleFunc("POST /close-partitions", a.partitions(true))
	a.mux.HandleFunc("POST /open-partitions", a.partitions(false))
	a.mux.HandleFunc("GET /slave-status", a.slaveStatus)
	a.mux.HandleFunc("POST /promote", a.servePromote)
	a.mux.HandleFunc("POST /switchover", a.serveSwitchover)
	a.mux.HandleFunc("POST /repair", a.repair)
	a.srv = &http.Server{
		Handler:           a.auth(a.mux),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	for _, ln := range []net.Listener{a.sock, a.ln} {
		if ln == nil {
			continue
		}
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("ADMIN: serve", "addr", ln.Addr().String(), "err", err)
			}
		}()
	}
	a.log.Info("ADMIN: listening", "socket", sock, "addr", a.Addr(), "token", token != "")
	return a, nil
}

// Addr returns the TCP listening address, "" when there is none.
func (a *Admin) Addr() string {
	if a.ln == nil {
		return ""
	}
	return a.ln.Addr().String()
}

// Socket returns the path of the unix socket.
func (a *Admin) Socket() string { return a.sock.Path() }

// Handle adds an endpoint (pattern as in http.ServeMux, e.g. "GET /lag").
// The token check applies to it too.
func (a *Admin) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// Close stops the endpoint, waiting up to 5 s for requests in progress.
func (a *Admin) Close() error {
	var err error
	a.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = a.srv.Shutdown(ctx)
		a.wg.Wait()
	})
	return err
}

func (a *Admin) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.token != "" {
			got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			if subtle.ConstantTimeCompare([]byte(got), []byte(a.token)) != 1 {
				http.Error(w, "missing or wrong token", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (a *Admin) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.b.Status())
}

func (a *Admin) stats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, a.b.Broker.Stats(r.URL.Query().Get("item")))
}

func (a *Admin) reload(w http.ResponseWriter, r *http.Request) {
	changes, err := a.b.Reload(r.Context())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"changes":         changes.String(),
		"topicsAdded":     changes.TopicsAdded,
		"topicsChanged":   changes.TopicsChanged,
		"topicsRemoved":   changes.TopicsRemoved,
		"restartRequired": changes.RestartKeys,
	})
}

func (a *Admin) partitions(closing bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		topic := q.Get("topic")
		if topic == "" {
			http.Error(w, "topic is required", http.StatusBadRequest)
			return
		}
		start, end := 0, -1
		if t, ok := a.b.Config().TopicFor(topic); ok {
			end = t.NumPartitions - 1
		} else {
			end = a.b.Config().System.NumPartitions - 1
		}
		var err error
		if s := q.Get("start"); s != "" {
			if start, err = strconv.Atoi(s); err != nil || start < 0 {
				http.Error(w, "bad start", http.StatusBadRequest)
				return
			}
		} else if closing {
			http.Error(w, "start and end are required", http.StatusBadRequest)
			return
		}
		if s := q.Get("end"); s != "" {
			if end, err = strconv.Atoi(s); err != nil || end < start {
				http.Error(w, "bad end", http.StatusBadRequest)
				return
			}
		} else if closing {
			http.Error(w, "start and end are required", http.StatusBadRequest)
			return
		}
		verb := "opened"
		if closing {
			if err := a.b.Broker.ClosePartitions(topic, start, end); err != nil {
				http.Error(w, err.Error(), http.StatusNotFound)
				return
			}
			verb = "closed"
		} else {
			a.b.Broker.OpenPartitions(topic, start, end)
		}
		a.log.Info("ADMIN: partitions "+verb, "topic", topic, "start", start, "end", end)
		fmt.Fprintf(w, "%s partitions %d..%d of %s\n", verb, start, end, topic)
	}
}

func (a *Admin) slaveStatus(w http.ResponseWriter, r *http.Request) {
	st, err := a.b.SlaveStatus()
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// repair fills a partition's damaged ranges from a replica (RepairFrom):
// POST /repair?topic=T&partition=P&from=host:port.
func (a *Admin) repair(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topic, from := q.Get("topic"), q.Get("from")
	part, err := strconv.Atoi(q.Get("partition"))
	if topic == "" || from == "" || err != nil || part < 0 {
		http.Error(w, "topic, partition and from (the replica's host:port) are required", http.StatusBadRequest)
		return
	}
	// A partition nothing was written to has no damage; one the
	// configuration does not have and the store does not hold is a typo.
	if _, err := a.b.Store.Partition(topic, part); errors.Is(err, store.ErrNoPartition) {
		if tc, ok := a.b.Broker.Config().TopicFor(topic); !ok || part >= tc.NumPartitions {
			http.Error(w, fmt.Sprintf("%s-%d: no such partition here (not in the configuration, nothing stored): nothing to repair", topic, part), http.StatusNotFound)
			return
		}
	}
	done, err := RepairFrom(r.Context(), a.b.Store, from, topic, part)
	for _, d := range done {
		a.log.Warn("ADMIN: damaged range repaired from a replica", "topic", topic, "partition", part, "from", d.From, "to", d.To, "replica", from)
		fmt.Fprintf(w, "repaired %s-%d [%d, %d) from %s\n", topic, part, d.From, d.To, from)
	}
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "not repaired: %v\n", err)
		return
	}
	if len(done) == 0 {
		fmt.Fprintf(w, "%s-%d has no damaged range\n", topic, part)
	}
}

// switchoverCallTimeout bounds POST /switchover's switchover (the followers'
// wait comes after it).
const switchoverCallTimeout = time.Minute

// AdminCallBound is how long the admin endpoint of a bundle running cfg may
// take to answer method path?query by its own bounds, 0 for a call that
// waits for nothing; a client waits at least that long, plus a margin of
// its own, before it gives up (`metaq-server promote -wait` at deploy/'s
// 30 s ZooKeeper session takes longer than a fixed minute):
//
//   - POST /promote: the raise of the generation (10 s), the wait for the
//     master node another session holds (up to zk.zkSessionTimeoutMs;
//     twice with wait=true, which waits for that session to expire first),
//     the background finisher's finishWait (default 20 s) and the
//     followers' followWait (default 10 s);
//   - POST /switchover: the switchover (1 minute) and followWait.
func AdminCallBound(cfg *config.Server, method, path string, query url.Values) time.Duration {
	if method != http.MethodPost {
		return 0
	}
	wait := func(key string, def time.Duration) time.Duration {
		if d, err := time.ParseDuration(query.Get(key)); err == nil && d >= 0 {
			return d
		}
		return def
	}
	follow := wait("followWait", defaultFollowWait)
	switch path {
	case "/promote":
		session := cfg.ZooKeeper.SessionTimeout
		if ok, _ := strconv.ParseBool(query.Get("wait")); ok {
			session *= 2
		}
		return raiseTimeout + session + wait("finishWait", defaultFinishWait) + follow
	case "/switchover":
		return switchoverCallTimeout + follow
	}
	return 0
}
