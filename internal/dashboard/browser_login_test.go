package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestBrowserSignsIn: headless Chromium, driven through the DevTools
// protocol, opens a dashboard that needs a token, is sent to the sign-in
// form, types the token and submits it as a person would, and lands on the
// dashboard, which renders the snapshot and the lag chart from the JSON API
// with the session cookie alone (the redirect after the sign-in carries the
// SameSite=Strict cookie: it is a same-site navigation). A wrong token
// leaves it on the form; the token never appears in a URL or in
// document.cookie.
func TestBrowserSignsIn(t *testing.T) {
	chromium := lookChromium(t)
	s := startServer(t, Options{Addr: "127.0.0.1:0", Token: "s3cret", Source: &fakeSource{}, SampleEvery: time.Hour})
	for i := 0; i < 4; i++ {
		s.Sample(context.Background())
	}
	base := "http://" + s.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := startDevTools(ctx, t, chromium)

	b.call(t, "Page.navigate", map[string]any{"url": base + "/"})
	b.waitFor(t, `location.pathname === "/login" && document.readyState === "complete" && !!document.querySelector("input[name=token]")`)

	signIn := func(token string) {
		t.Helper()
		b.eval(t, fmt.Sprintf(`(() => { const i = document.querySelector("input[name=token]"); i.value = %q; i.form.submit(); return true })()`, token))
	}
	signIn("wrong")
	b.waitFor(t, `document.readyState === "complete" && document.body.innerText.includes("Wrong token.")`)

	signIn("s3cret")
	b.waitFor(t, `location.pathname === "/" && document.querySelectorAll("polyline.lag-line").length === 2`)
	dom := b.eval(t, `document.documentElement.outerHTML`).(string)
	if !strings.Contains(dom, "site bj (master, broker 1)") || !strings.Contains(dom, "meta-slave-group-hf") {
		t.Fatalf("the dashboard did not render the snapshot after signing in:\n%s", dom)
	}
	for _, l := range regexp.MustCompile(`<polyline class="lag-line" data-series="([^"]+)" data-points="(\d+)"`).FindAllStringSubmatch(dom, -1) {
		if l[2] != "5" {
			t.Errorf("series %s has %s points, want 5 (one per sample)", l[1], l[2])
		}
	}
	if where := b.eval(t, `location.href + " " + document.cookie`).(string); strings.Contains(where, "s3cret") {
		t.Errorf("the token shows in the URL or a script-readable cookie: %s", where)
	}
	// The session outlives the page: leaving and coming back (a typed
	// address, not a redirect) shows the dashboard, not the form.
	b.call(t, "Page.navigate", map[string]any{"url": "about:blank"})
	b.waitFor(t, `location.href === "about:blank"`)
	b.call(t, "Page.navigate", map[string]any{"url": base + "/"})
	b.waitFor(t, `location.pathname === "/" && document.querySelectorAll("polyline.lag-line").length === 2`)
}

func lookChromium(t *testing.T) string {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
		}
		t.Skip("chromium is not installed (apt-get install chromium); bash .ci/run installs it")
	}
	return chromium
}

// devTools is headless Chromium driven over --remote-debugging-pipe: JSON
// messages ended by a NUL byte, written to its fd 3 and read from its fd 4,
// on one page target.
type devTools struct {
	w       *os.File
	mu      sync.Mutex
	nextID  int
	waiting map[int]chan devToolsReply
	session string
	ctx     context.Context
}

type devToolsReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func startDevTools(ctx context.Context, t *testing.T, chromium string) *devTools {
	t.Helper()
	inR, inW, err := os.Pipe() // our commands: Chromium's fd 3
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe() // its answers: Chromium's fd 4
	if err != nil {
		t.Fatal(err)
	}
	// The profile is removed once Chromium and its helpers are gone (a
	// t.TempDir would be removed while they may still write to it).
	profile, err := os.MkdirTemp("", "metaq-dashboard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
		"--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+profile, "--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{inR, outW}
	// Its own process group, so its helper processes are stopped with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	inR.Close()
	outW.Close()
	d := &devTools{w: inW, waiting: map[int]chan devToolsReply{}, ctx: ctx}
	done := make(chan struct{})
	t.Cleanup(func() {
		inW.Close() // Chromium exits when its pipe closes
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		pgid := cmd.Process.Pid
		syscall.Kill(-pgid, syscall.SIGKILL) // helpers left in its group
		for range 50 {
			if syscall.Kill(-pgid, 0) != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		outR.Close()
		<-done
		if err := os.RemoveAll(profile); err != nil {
			t.Errorf("chromium profile: %v", err)
		}
	})
	go func() {
		defer close(done)
		r := bufio.NewReader(outR)
		for {
			msg, err := r.ReadBytes(0)
			if err != nil {
				return
			}
			var m struct {
				ID int `json:"id"`
				devToolsReply
			}
			if json.Unmarshal(msg[:len(msg)-1], &m) != nil || m.ID == 0 {
				continue // an event
			}
			d.mu.Lock()
			ch := d.waiting[m.ID]
			delete(d.waiting, m.ID)
			d.mu.Unlock()
			if ch != nil {
				ch <- m.devToolsReply
			}
		}
	}()
	var target struct {
		TargetID string `json:"targetId"`
	}
	d.decode(t, d.call(t, "Target.createTarget", map[string]any{"url": "about:blank"}), &target)
	var att struct {
		SessionID string `json:"sessionId"`
	}
	d.decode(t, d.call(t, "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}), &att)
	d.session = att.SessionID
	return d
}

func (d *devTools) decode(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("devtools: %v in %s", err, raw)
	}
}

// call sends method to the page (to the browser before a page is
// attached) and returns its result.
func (d *devTools) call(t *testing.T, method string, params map[string]any) json.RawMessage {
	t.Helper()
	r, err := d.send(method, params)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (d *devTools) send(method string, params map[string]any) (json.RawMessage, error) {
	d.mu.Lock()
	d.nextID++
	id := d.nextID
	ch := make(chan devToolsReply, 1)
	d.waiting[id] = ch
	d.mu.Unlock()
	msg := map[string]any{"id": id, "method": method, "params": params}
	if d.session != "" {
		msg["sessionId"] = d.session
	}
	data, _ := json.Marshal(msg)
	if _, err := d.w.Write(append(data, 0)); err != nil {
		return nil, fmt.Errorf("devtools %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return nil, fmt.Errorf("devtools %s: %s", method, r.Error.Message)
		}
		return r.Result, nil
	case <-d.ctx.Done():
		return nil, fmt.Errorf("devtools %s: no answer: %w", method, d.ctx.Err())
	}
}

// eval evaluates a JavaScript expression in the page and returns its value.
func (d *devTools) eval(t *testing.T, expr string) any {
	t.Helper()
	v, err := d.tryEval(expr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tryEval is eval returning its error: while the page navigates there may
// be no context to evaluate in.
func (d *devTools) tryEval(expr string) (any, error) {
	raw, err := d.send("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	if err != nil {
		return nil, err
	}
	var r struct {
		Result struct {
			Value any `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("devtools: %v in %s", err, raw)
	}
	if r.Exception != nil {
		return nil, fmt.Errorf("%s: %s", expr, r.Exception.Text)
	}
	return r.Result.Value, nil
}

// waitFor polls a JavaScript condition until it is true (a navigation in
// progress answers false, or an error, which is retried).
func (d *devTools) waitFor(t *testing.T, cond string) {
	t.Helper()
	expr := `(() => { try { return !!(` + cond + `) } catch (e) { return false } })()`
	for {
		if v, err := d.tryEval(expr); err == nil && v == true {
			return
		}
		select {
		case <-d.ctx.Done():
			page, _ := d.tryEval(`location.href + "\n" + document.documentElement.outerHTML`)
			t.Fatalf("page never met %s; it shows %v", cond, page)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
