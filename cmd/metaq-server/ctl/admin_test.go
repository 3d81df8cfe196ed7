package ctl

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"metaq/broker/config"
)

// TestAdminWaitsAsLongAsTheCallMay: an admin call the server may take
// longer than AdminTimeout to answer (promote -wait: the session it waits
// for, the finisher's and the followers' waits) is not given up by the
// client while the server still works: DoWithin waits the call's bound
// plus AdminMargin. Do, with the fixed AdminTimeout, gives the same call
// up (the client's "context deadline exceeded" while the promotion goes
// on at the server). AdminTimeout is shortened so that the test takes
// seconds, not minutes.
func TestAdminWaitsAsLongAsTheCallMay(t *testing.T) {
	old := AdminTimeout
	AdminTimeout = 300 * time.Millisecond
	defer func() { AdminTimeout = old }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const takes = 800 * time.Millisecond
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(takes):
			w.Write([]byte(`{"generation":2}`))
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	defer srv.Close()
	cfg := &config.Server{}
	cfg.Site.AdminAddr = ln.Addr().String()
	a := NewAdmin(cfg)
	if a.HTTP.Timeout != AdminTimeout {
		t.Fatalf("NewAdmin: timeout %v, want AdminTimeout %v", a.HTTP.Timeout, AdminTimeout)
	}
	_, err = a.Do(context.Background(), "POST", "/promote", nil)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Do of a call longer than AdminTimeout: %v, want the client's timeout", err)
	}
	body, err := a.DoWithin(context.Background(), takes, "POST", "/promote", nil)
	if err != nil || !strings.Contains(body, `"generation":2`) {
		t.Fatalf("DoWithin(%v): %q %v, want the answer", takes, body, err)
	}
	if a.HTTP.Timeout != AdminTimeout {
		t.Fatalf("DoWithin changed the client's own timeout to %v", a.HTTP.Timeout)
	}
}

// TestAdminURL: a wildcard bind of [site] adminAddr is reached on loopback
// (the command runs on the bundle's host), any other host as written.
func TestAdminURL(t *testing.T) {
	for addr, want := range map[string]string{
		"":                  "",
		"0.0.0.0:8130":      "http://127.0.0.1:8130",
		":8130":             "http://127.0.0.1:8130",
		"[::]:8130":         "http://127.0.0.1:8130",
		"127.0.0.1:8130":    "http://127.0.0.1:8130",
		"198.51.100.7:8130": "http://198.51.100.7:8130",
		"[::1]:8130":        "http://[::1]:8130",
		"no-port":           "",
	} {
		cfg := &config.Server{}
		cfg.Site.AdminAddr = addr
		if got := AdminURL(cfg); got != want {
			t.Errorf("AdminURL(adminAddr=%q) = %q, want %q", addr, got, want)
		}
	}
}
