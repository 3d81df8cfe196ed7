package ctl

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"metaq/broker/config"
	"metaq/internal/unixsock"
)

// Stats sends `stats <item> 0` over the MetaQ protocol, as BrokerStatsTool
// does, and returns the body of the answer (for item "config" the raw
// server.ini). A blank item asks for system stats (two spaces on the wire).
func Stats(ctx context.Context, addr, item string, timeout time.Duration) (string, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("ctl: stats: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintf(c, "stats %s 0\r\n", item); err != nil {
		return "", fmt.Errorf("ctl: stats: %w", err)
	}
	code, body, err := readResult(bufio.NewReader(c))
	if err != nil {
		return "", fmt.Errorf("ctl: stats: %w", err)
	}
	if code != 200 {
		return body, fmt.Errorf("ctl: stats %q: broker answered %d: %s", item, code, body)
	}
	return body, nil
}

// readResult reads one `result <code> <len> <opaque>\r\n<body>` frame.
func readResult(r *bufio.Reader) (int, string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, "", err
	}
	f := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	if len(f) != 4 || f[0] != "result" {
		return 0, "", fmt.Errorf("unexpected answer %q", line)
	}
	code, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || n < 0 || n > 64<<20 {
		return 0, "", fmt.Errorf("unexpected answer %q", line)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, "", err
	}
	return code, string(body), nil
}

// Admin calls a running server's admin endpoint.
type Admin struct {
	Base  string // http://host:port (a unix socket's requests use http://admin)
	Where string // the endpoint in error messages: Base, or unix:<path>
	Token string
	HTTP  *http.Client
}

// NewAdmin returns a client for the admin endpoint that cfg configures: its
// TCP address when [site] adminAddr gives one, else its unix socket in the
// data directory (cfg's dataPath, after any -data override).
func NewAdmin(cfg *config.Server) *Admin {
	if base := AdminURL(cfg); base != "" {
		return &Admin{Base: base, Where: base, Token: cfg.Site.Token, HTTP: &http.Client{Timeout: AdminTimeout}}
	}
	sock := cfg.System.AdminSocket()
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return unixsock.Dial(ctx, sock, 10*time.Second)
		},
	}
	return &Admin{Base: "http://admin", Where: "unix:" + sock, Token: cfg.Site.Token,
		HTTP: &http.Client{Timeout: AdminTimeout, Transport: tr}}
}

// AdminTimeout is how long an admin call waits for its answer, unless the
// call asks for longer (DoWithin). A variable for tests.
var AdminTimeout = 60 * time.Second

// AdminMargin is what a client adds to the server's own bound of a call
// (DoWithin): the time to send and read it, and a loaded host.
const AdminMargin = 30 * time.Second

// DoWithin is Do for a call the server may take up to bound to answer (its
// own waits, as the command asked for them): the client waits bound plus
// AdminMargin, and never less than AdminTimeout.
func (a *Admin) DoWithin(ctx context.Context, bound time.Duration, method, path string, query url.Values) (string, error) {
	c := *a.HTTP
	c.Timeout = max(c.Timeout, bound+AdminMargin)
	return (&Admin{Base: a.Base, Where: a.Where, Token: a.Token, HTTP: &c}).Do(ctx, method, path, query)
}

// Do sends method path?query and returns the body; a non-2xx answer is an error.
func (a *Admin) Do(ctx context.Context, method, path string, query url.Values) (string, error) {
	u := a.Base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return "", fmt.Errorf("ctl: %w", err)
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("ctl: admin endpoint %s: %w", a.Where, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", fmt.Errorf("ctl: admin endpoint %s: %w", a.Where, err)
	}
	if resp.StatusCode/100 != 2 {
		return string(body), fmt.Errorf("ctl: %s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}
