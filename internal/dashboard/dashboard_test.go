package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"metaq/internal/testutil"
	"metaq/topology"
)

// fakeSource returns a snapshot whose lag grows by one second per call, so
// successive samples differ.
type fakeSource struct{ n atomic.Int64 }

func (f *fakeSource) Snapshot(context.Context) Snapshot {
	n := f.n.Add(1)
	return Snapshot{
		Site: "bj", Role: "master", BrokerID: 1, ServeURL: "meta://127.0.0.1:8123",
		Time:   time.Unix(1_700_000_000+n*5, 0),
		Health: []HealthItem{{Name: "storage", OK: true}, {Name: "replication", OK: true}},
		Topics: []Topic{{Name: "orders", Partitions: []Partition{{Partition: 0, Max: 2500, Bytes: 2500, Messages: 100}}}},
		Lag: []topology.Report{
			{LagSummary: topology.LagSummary{SlaveGroup: "meta-slave-group-hf", Bytes: 1000 * n, Messages: 10 * n, State: topology.LagLagging},
				Site: "hf", SecondsBehind: float64(n)},
			{LagSummary: topology.LagSummary{SlaveGroup: "meta-slave-group-gz", State: topology.LagOK}, Site: "gz", SecondsBehind: 0.5},
		},
		Sites:   []Site{{Name: "bj", Role: "master", Addr: "127.0.0.1:8126", State: "up"}},
		Gateway: &topology.GatewayReport{Forwarded: 7, InFlightBytes: 12345, MaxInFlightBytes: 67108864, Full: 3},
	}
}

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	code, body := testutil.HTTPDo(t, "GET", url, token)
	return code, string(body)
}

func TestAPIAndHistory(t *testing.T) {
	src := &fakeSource{}
	s := startServer(t, Options{Addr: "127.0.0.1:0", Source: src, SampleEvery: time.Hour, HistoryLen: 3})
	// The start-up sample is taken by the sampler goroutine.
	testutil.Eventually(t, 5*time.Second, 5*time.Millisecond, func() error {
		if len(s.History()) == 0 {
			return errors.New("no start-up sample yet")
		}
		return nil
	})
	for i := 0; i < 5; i++ {
		s.Sample(context.Background())
	}
	base := "http://" + s.Addr().String()
	code, body := get(t, base+"/api/lag/history", "")
	if code != 200 {
		t.Fatalf("history: %d %s", code, body)
	}
	var hist []LagSample
	if err := json.Unmarshal([]byte(body), &hist); err != nil {
		t.Fatal(err)
	}
	// One sample at start-up plus five, capped at three, oldest dropped.
	if len(hist) != 3 || hist[2].Rows[0].SecondsBehind != 6 || hist[0].Rows[0].SecondsBehind != 4 {
		t.Fatalf("history = %+v", hist)
	}
	code, body = get(t, base+"/api/snapshot", "")
	if code != 200 || !strings.Contains(body, `"site": "bj"`) {
		t.Fatalf("snapshot: %d %s", code, body)
	}
	code, body = get(t, base+"/metrics", "")
	if code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("metrics: %d", code)
	}
}

func TestNonLoopbackNeedsToken(t *testing.T) {
	if _, err := New(Options{Addr: "0.0.0.0:0", Source: &fakeSource{}}); err == nil {
		t.Fatal("a non-loopback address without a token must be refused")
	}
	s := startServer(t, Options{Addr: "127.0.0.1:0", Token: "s3cret", Source: &fakeSource{}})
	base := "http://" + s.Addr().String()
	if code, _ := get(t, base+"/api/snapshot", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := get(t, base+"/api/snapshot", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _ := get(t, base+"/api/snapshot", "s3cret"); code != 200 {
		t.Fatalf("right token: %d", code)
	}
	// A token in the URL is refused, even the right one, and sets no cookie.
	resp, err := http.Get(base + "/api/snapshot?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("token in query: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	// A browser signs in with the token in a POST body and gets a cookie.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err = noRedirect.PostForm(base+"/login", url.Values{"token": {"wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token at /login: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, err = noRedirect.PostForm(base+"/login", url.Values{"token": {"s3cret"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 || !resp.Cookies()[0].HttpOnly {
		t.Fatalf("sign in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	req, _ := http.NewRequest("GET", base+"/api/snapshot", nil)
	req.AddCookie(resp.Cookies()[0])
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the sign-in cookie: %d", resp.StatusCode)
	}
}

// TestPageRendersLagChart loads the page in headless Chromium and checks that
// the lag chart drew one line per slave group from the sampled history.
func TestPageRendersLagChart(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium is not installed (apt-get install chromium); bash .ci/run installs it")
	}
	src := &fakeSource{}
	s := startServer(t, Options{Addr: "127.0.0.1:0", Source: src, SampleEvery: time.Hour})
	for i := 0; i < 4; i++ {
		s.Sample(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom",
		"http://"+s.Addr().String()+"/")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	lines := regexp.MustCompile(`<polyline class="lag-line" data-series="([^"]+)" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1)
	if len(lines) != 2 {
		t.Fatalf("lag lines in the rendered chart = %d, want 2\n%s", len(lines), dom)
	}
	for _, l := range lines {
		if n, _ := strconv.Atoi(l[2]); n != 5 {
			t.Fatalf("series %s has %s points, want 5 (one per sample)", l[1], l[2])
		}
	}
	if !strings.Contains(dom, "site bj (master, broker 1)") || !strings.Contains(dom, "meta-slave-group-hf") {
		t.Fatalf("page did not render the snapshot:\n%s", dom)
	}
	// The write gateway's forwarded bytes in flight against their bound
	// ([site] forwardMaxInFlightBytes) and the puts refused for it.
	if !strings.Contains(dom, "<td>12345 / 67108864</td><td>3</td>") {
		t.Fatalf("page does not show the gateway's bytes in flight and its bound:\n%s", dom)
	}
}

// TestLoginSessionAndRateLimit: signing in sets a random session id, not
// the token, in an HttpOnly SameSite cookie; a cookie holding the token is
// not accepted; sign-in attempts from one address are rate-limited while
// another address can still sign in.
func TestLoginSessionAndRateLimit(t *testing.T) {
	s := startServer(t, Options{Addr: "127.0.0.1:0", Token: "s3cret", Source: &fakeSource{}})
	base := "http://" + s.Addr().String()
	client := func(src string) *http.Client {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
		return &http.Client{Transport: &http.Transport{DialContext: d.DialContext},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	login := func(c *http.Client, token string) *http.Response {
		t.Helper()
		resp, err := c.PostForm(base+"/login", url.Values{"token": {token}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	snapshotWith := func(ck *http.Cookie) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/api/snapshot", nil)
		req.AddCookie(ck)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	a := client("127.0.0.1")
	resp := login(a, "s3cret")
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("sign in: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	ck := resp.Cookies()[0]
	if ck.Value == "" || strings.Contains(ck.Value, "s3cret") || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie %+v: want a random id, HttpOnly, SameSite=Strict", ck)
	}
	if code := snapshotWith(ck); code != 200 {
		t.Fatalf("with the session cookie: %d", code)
	}
	for _, forged := range []*http.Cookie{{Name: "metaq_token", Value: "s3cret"}, {Name: ck.Name, Value: "s3cret"}, {Name: ck.Name, Value: ck.Value + "0"}} {
		if code := snapshotWith(forged); code != http.StatusUnauthorized {
			t.Fatalf("cookie %s=%s: %d, want 401", forged.Name, forged.Value, code)
		}
	}

	// Guessing from one address: a few tries, then refused, even the right
	// token, and told when to come back.
	limited := false
	for i := range 20 {
		resp := login(a, fmt.Sprintf("guess%d", i))
		if resp.StatusCode == http.StatusTooManyRequests {
			limited = resp.Header.Get("Retry-After") != ""
			break
		}
	}
	if !limited {
		t.Fatal("20 wrong sign-ins in a row were never limited")
	}
	if resp := login(a, "s3cret"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("sign in right after the limit: %d, want 429", resp.StatusCode)
	}
	// Another address is not held back.
	if resp := login(client("127.0.0.2"), "s3cret"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in from another address: %d", resp.StatusCode)
	}
}

// masterSource reports the slave groups of whichever site is master now.
type masterSource struct{ master atomic.Value }

func (m *masterSource) Snapshot(context.Context) Snapshot {
	master, _ := m.master.Load().(string)
	rows := map[string][]topology.Report{
		"bj": {
			{LagSummary: topology.LagSummary{SlaveGroup: "meta-slave-group-hf", State: topology.LagDown}, Site: "hf", MasterSite: "bj", SecondsBehind: 421},
			{LagSummary: topology.LagSummary{SlaveGroup: "meta-slave-group-gz", State: topology.LagOK}, Site: "gz", MasterSite: "bj", SecondsBehind: 0.2},
		},
		"hf": {
			{LagSummary: topology.LagSummary{SlaveGroup: "meta-slave-group-gz", State: topology.LagOK}, Site: "gz", MasterSite: "hf", SecondsBehind: 0.3},
		},
	}[master]
	return Snapshot{Site: "hf", Time: time.Now(), Lag: rows}
}

// TestHistoryFollowsTheMaster: once another site is master, the chart's
// history holds only the new master's groups: no series of a group that is
// gone, no axis stretched by its last figures.
func TestHistoryFollowsTheMaster(t *testing.T) {
	src := &masterSource{}
	src.master.Store("bj")
	s, err := New(Options{Addr: "127.0.0.1:0", Source: src, SampleEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Sample(context.Background())
	}
	src.master.Store("hf")
	for range 2 {
		s.Sample(context.Background())
	}
	hist := s.History()
	if len(hist) != 2 {
		t.Fatalf("%d samples after the failover, want the new master's 2", len(hist))
	}
	for _, h := range hist {
		for _, r := range h.Rows {
			if r.MasterSite != "hf" || r.SecondsBehind > 1 {
				t.Fatalf("a sample from before the failover is left: %+v", r)
			}
		}
	}
}

// twoBrokerSource is deploy/local-three-sites.sh's layout after a
// switchover to hf: broker ids 1 and 2 each have a slave group of the same
// name at bj and at gz.
type twoBrokerSource struct{ n atomic.Int64 }

func (f *twoBrokerSource) Snapshot(context.Context) Snapshot {
	n := f.n.Add(1)
	row := func(id int, group, site string, secs float64) topology.Report {
		return topology.Report{LagSummary: topology.LagSummary{SlaveGroup: group, State: topology.LagOK},
			Site: site, BrokerID: id, MasterSite: "hf", SecondsBehind: secs}
	}
	return Snapshot{
		Site: "hf", Role: "master", BrokerID: 1, Time: time.Unix(1_700_000_000+n*5, 0),
		Lag: []topology.Report{
			row(1, "meta-slave-group-bj", "bj", 1), row(1, "meta-slave-group-gz", "gz", 2),
			row(2, "meta-slave-group-bj", "bj", 3), row(2, "meta-slave-group-gz", "gz", 4),
		},
	}
}

// TestPageChartsEveryBrokerID: with two broker ids whose slave groups have
// the same names and sites, the chart draws one line per broker id's group
// (not one line mixing both ids' points), the table names the broker, and
// the consumer groups of both ids that /lag lists are shown.
func TestPageChartsEveryBrokerID(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium is not installed (apt-get install chromium); bash .ci/run installs it")
	}
	// /lag as the bundle mounts it, with both ids' consumer groups.
	lag := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, topology.LagDocument{ConsumerScope: topology.ScopePool, Consumers: []topology.ConsumerLagReport{
			{Site: "bj", Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 1, Partitions: 4, Bytes: 111},
			{Site: "bj", Root: "/meta", Group: "g1", Topic: "orders", BrokerID: 2, Partitions: 4, Bytes: 222},
		}})
	})
	s := startServer(t, Options{Addr: "127.0.0.1:0", Source: &twoBrokerSource{}, SampleEvery: time.Hour,
		Extra: map[string]http.Handler{"GET /lag": lag}})
	for range 3 {
		s.Sample(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=5000", "--dump-dom",
		"http://"+s.Addr().String()+"/").Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	dom := string(out)
	lines := regexp.MustCompile(`<polyline class="lag-line" data-series="([^"]+)" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1)
	var series []string
	for _, l := range lines {
		series = append(series, l[1]+" ("+l[2]+" points)")
	}
	// 3 samples, plus the one Start may take: at least 3 points each.
	if len(lines) != 4 {
		t.Fatalf("lag lines = %d, want 4 (one per broker id's group): %v", len(lines), series)
	}
	for _, l := range lines {
		if n, _ := strconv.Atoi(l[2]); n < 3 || n > 4 {
			t.Fatalf("series %s has %s points, want one per sample: %v", l[1], l[2], series)
		}
	}
	for _, want := range []string{
		"<td>g1</td><td>bj</td><td>/meta</td><td>orders</td><td>1</td><td>4</td><td>111</td>",
		"<td>g1</td><td>bj</td><td>/meta</td><td>orders</td><td>2</td><td>4</td><td>222</td>",
		"<td>meta-slave-group-bj</td><td>bj</td><td>2</td><td>hf</td>",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}
