package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sessionCookie names the cookie a browser signed in with: a random session
// id the server maps to its expiry, never the token itself, so a cookie
// that leaks (a browser profile, a proxy log) is not the token, expires,
// and is worth nothing to another server.
const sessionCookie = "metaq_session"

const (
	// sessionTTL is how long a sign-in lasts.
	sessionTTL = 12 * time.Hour
	// maxSessions bounds the sessions held; the oldest goes first.
	maxSessions = 1024
	// loginEvery and loginBurst rate-limit sign-in attempts per client
	// address: a burst for typing mistakes, then one attempt per loginEvery.
	loginEvery = 2 * time.Second
	loginBurst = 5
	// maxLoginAddrs bounds the addresses whose attempts are counted; idle
	// ones are forgotten first.
	maxLoginAddrs = 4096
)

// sessions maps session ids to their expiry.
type sessions struct {
	mu  sync.Mutex
	ids map[string]time.Time
}

// create returns a new session id.
func (s *sessions) create(now time.Time) string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = make(map[string]time.Time)
	}
	for k, exp := range s.ids {
		if !now.Before(exp) {
			delete(s.ids, k)
		}
	}
	for len(s.ids) >= maxSessions {
		var oldest string
		var at time.Time
		for k, exp := range s.ids {
			if oldest == "" || exp.Before(at) {
				oldest, at = k, exp
			}
		}
		delete(s.ids, oldest)
	}
	s.ids[id] = now.Add(sessionTTL)
	return id
}

// valid reports whether id is a live session.
func (s *sessions) valid(id string, now time.Time) bool {
	if id == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.ids[id]
	if ok && !now.Before(exp) {
		delete(s.ids, id)
		return false
	}
	return ok
}

// loginLimits rate-limits sign-in attempts per client address.
type loginLimits struct {
	mu    sync.Mutex
	addrs map[string]*loginLimit
}

type loginLimit struct {
	lim  *rate.Limiter
	seen time.Time
}

// allow reports whether the address of r may try to sign in now, and if
// not, how long it should wait.
func (l *loginLimits) allow(r *http.Request, now time.Time) (bool, time.Duration) {
	addr, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		addr = r.RemoteAddr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addrs == nil {
		l.addrs = make(map[string]*loginLimit)
	}
	e := l.addrs[addr]
	if e == nil {
		if len(l.addrs) >= maxLoginAddrs {
			for k, x := range l.addrs {
				// Full again after loginBurst*loginEvery: nothing to remember.
				if now.Sub(x.seen) > loginBurst*loginEvery {
					delete(l.addrs, k)
				}
			}
		}
		if len(l.addrs) >= maxLoginAddrs {
			return false, loginEvery
		}
		e = &loginLimit{lim: rate.NewLimiter(rate.Every(loginEvery), loginBurst)}
		l.addrs[addr] = e
	}
	e.seen = now
	res := e.lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}
