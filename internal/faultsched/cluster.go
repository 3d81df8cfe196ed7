package faultsched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Cluster runs the layout's processes: a ZooKeeper per site (started as
// .ci/zookeeper.sh does) and a metaq-server per site, started with the
// systemd unit's command line, behind the link proxies.
type Cluster struct {
	L     *Layout
	Bin   string // holds metaq-server
	Repo  string // the repository (for .ci/zookeeper.sh)
	Links *Links
	// KeepData copies each site's data filesystem aside (<dataPath>.saved)
	// before Close unmounts it.
	KeepData bool

	mu    sync.Mutex
	procs map[string]*proc
	nats  map[string]*proc // the sites' NATS servers, with configsync
	// pushed is the last server.ini a push published (the next push
	// adds to it).
	pushed  []byte
	pushN   int
	stopped map[string]bool // SIGSTOPped
	zkDown  map[string]bool
	exits   []string // processes that exited without being killed
	closing bool
	mounted []string // the sites' data filesystems (tmpfs), when root
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	out    *os.File
	killed bool
}

// NewCluster returns a cluster of the layout's sites, nothing started.
func NewCluster(l *Layout, bin, repo string) *Cluster {
	c := &Cluster{L: l, Bin: bin, Repo: repo, procs: map[string]*proc{}, nats: map[string]*proc{}, stopped: map[string]bool{}, zkDown: map[string]bool{}}
	c.Links = NewLinks(c.pids)
	return c
}

func (c *Cluster) pids() map[int]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int]string{}
	for s, p := range c.procs {
		m[p.cmd.Process.Pid] = s
	}
	for s, p := range c.nats {
		m[p.cmd.Process.Pid] = s // a site's NATS server dials the others' gateways
	}
	return m
}

// Start starts every ZooKeeper and proxy, then bj and the two slave sites,
// and waits until each answers its admin /status.
func (c *Cluster) Start(ctx context.Context) error {
	c.mountDisks()
	for _, s := range Sites {
		if err := c.StartZK(ctx, s); err != nil {
			return err
		}
		if err := c.Links.ListenSite(c.L, s); err != nil {
			return err
		}
		if c.L.ConfigSync {
			if err := c.startNATS(ctx, s); err != nil {
				return err
			}
		}
	}
	for _, s := range Sites {
		if err := c.StartSite(s); err != nil {
			return err
		}
		if err := c.WaitUp(ctx, s, 60*time.Second); err != nil {
			return err
		}
	}
	if c.L.ConfigSync {
		return c.firstPush(ctx)
	}
	return nil
}

// StartZK starts the site's ZooKeeper (its data kept across restarts).
func (c *Cluster) StartZK(ctx context.Context, site string) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(c.Repo, ".ci", "zookeeper.sh"), "start",
		fmt.Sprint(c.L.port(site, offZK)), c.L.ZKDir(site))
	cmd.WaitDelay = 5 * time.Second
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("faultsched: start ZooKeeper of %s: %w\n%s", site, err, out)
	}
	c.mu.Lock()
	c.zkDown[site] = false
	c.mu.Unlock()
	return nil
}

// StopZK stops the site's ZooKeeper (by the pid it recorded) and waits for
// it to exit.
func (c *Cluster) StopZK(site string) error {
	b, err := os.ReadFile(filepath.Join(c.L.ZKDir(site), "zk.pid"))
	if err != nil {
		return fmt.Errorf("faultsched: ZooKeeper of %s: %w", site, err)
	}
	var pid int
	if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 {
		return fmt.Errorf("faultsched: ZooKeeper of %s: bad pid file %q", site, b)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	os.Remove(filepath.Join(c.L.ZKDir(site), "zk.pid"))
	c.mu.Lock()
	c.zkDown[site] = true
	c.mu.Unlock()
	return nil
}

// ZKDown reports whether the site's ZooKeeper is stopped.
func (c *Cluster) ZKDown(site string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.zkDown[site]
}

// UnitArgs is the systemd unit's ExecStart for the site: the master file,
// and on a configured slave site METAQ_ROLE=slave with its
// async_slave.properties.
func (c *Cluster) UnitArgs(site string) []string {
	conf := c.L.Conf(site)
	args := []string{"start"}
	if site != Sites[0] {
		args = append(args, "slave")
	}
	args = append(args, "-f", filepath.Join(conf, "server.ini"))
	if site != Sites[0] {
		args = append(args, "-s", filepath.Join(conf, "async_slave.properties"))
	}
	return append(args, "-foreground")
}

// StartSite starts the site's metaq-server with the unit's command.
func (c *Cluster) StartSite(site string) error {
	return c.startProgram(site, filepath.Join(c.Bin, "metaq-server"), c.UnitArgs(site)...)
}

// startProgram runs program as the site's process, its output in the
// site's logs/server.out.
func (c *Cluster) startProgram(site, program string, args ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs[site] != nil {
		return fmt.Errorf("faultsched: %s is already running", site)
	}
	logs := filepath.Join(c.L.SiteDir(site), "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("faultsched: %s: %w", site, err)
	}
	out, err := os.OpenFile(filepath.Join(logs, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("faultsched: %s: %w", site, err)
	}
	fmt.Fprintf(out, "==== %s start %v\n", time.Now().UTC().Format(time.RFC3339Nano), args)
	cmd := exec.Command(program, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Dir = c.L.SiteDir(site)
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("faultsched: start %s: %w", site, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), out: out}
	c.procs[site] = p
	c.stopped[site] = false
	started := time.Now()
	go func() {
		err := cmd.Wait()
		out.Close()
		c.mu.Lock()
		if c.procs[site] == p {
			delete(c.procs, site)
		}
		if !p.killed && !c.closing {
			c.exits = append(c.exits, fmt.Sprintf("%s (pid %d, started %v before) exited by itself: %v; its log: %s",
				site, cmd.Process.Pid, time.Since(started).Round(time.Millisecond), err, filepath.Join(logs, "server.out")))
		}
		c.mu.Unlock()
		close(p.done)
	}()
	return nil
}

// Running reports whether the site's process runs (stopped or not).
func (c *Cluster) Running(site string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[site] != nil
}

// Exits lists the site processes that exited without being killed.
func (c *Cluster) Exits() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.exits...)
}

// Stopped reports whether the site's process is SIGSTOPped.
func (c *Cluster) Stopped(site string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[site] != nil && c.stopped[site]
}

// Kill sends SIGKILL to the site's process and waits for it to exit.
func (c *Cluster) Kill(site string) error {
	c.mu.Lock()
	p := c.procs[site]
	c.mu.Unlock()
	if p == nil {
		return fmt.Errorf("faultsched: kill %s: not running", site)
	}
	c.mu.Lock()
	p.killed = true
	c.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("faultsched: kill %s: pid %d did not exit in 10s", site, p.cmd.Process.Pid)
	}
	return nil
}

// Dump makes a site's process print every goroutine's stack into its log
// and exit (Go's runtime answers SIGQUIT so), for a site that stopped
// answering: the stacks show where it blocked. It returns the log's path.
func (c *Cluster) Dump(site string) (string, error) {
	c.mu.Lock()
	p := c.procs[site]
	if p != nil {
		p.killed = true
	}
	c.mu.Unlock()
	if p == nil {
		return "", fmt.Errorf("faultsched: dump %s: not running", site)
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	if err := p.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		return "", fmt.Errorf("faultsched: dump %s: %w", site, err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	return filepath.Join(c.L.SiteDir(site), "logs", "server.out"), nil
}

// Stacks makes a site's process print every goroutine's stack into its
// log (metaq-server answers SIGUSR1 so) and go on, for a site that does
// not answer: unlike Dump, the run goes on with the site as it was. It
// returns the log's path.
func (c *Cluster) Stacks(site string) (string, error) {
	c.mu.Lock()
	p := c.procs[site]
	c.mu.Unlock()
	if p == nil {
		return "", fmt.Errorf("faultsched: stacks of %s: not running", site)
	}
	if err := p.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return "", fmt.Errorf("faultsched: stacks of %s: %w", site, err)
	}
	return filepath.Join(c.L.SiteDir(site), "logs", "server.out"), nil
}

// Pause sends SIGSTOP (on) or SIGCONT to the site's process.
func (c *Cluster) Pause(site string, on bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.procs[site]
	if p == nil {
		return fmt.Errorf("faultsched: pause %s: not running", site)
	}
	sig := syscall.SIGCONT
	if on {
		sig = syscall.SIGSTOP
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("faultsched: %v %s: %w", sig, site, err)
	}
	c.stopped[site] = on
	return nil
}

// WaitUp waits until the site's admin endpoint answers /status.
func (c *Cluster) WaitUp(ctx context.Context, site string, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if !c.Running(site) {
			return fmt.Errorf("faultsched: %s exited while starting; see %s", site, filepath.Join(c.L.SiteDir(site), "logs", "server.out"))
		}
		if _, last = c.Status(ctx, site); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("faultsched: %s did not answer /status in %v: %v", site, d, last)
}

// SiteStatus is the part of the admin /status answer the harness reads.
type SiteStatus struct {
	Mode    string `json:"mode"`
	Healthy bool   `json:"healthy"`
	Health  string `json:"health"`
}

// Status reads the site's admin /status. It waits longer than the 2 s a
// site's status may spend confirming its master node in ZooKeeper (a
// loaded machine adds to it): a site slower than that is not one that
// does not answer.
func (c *Cluster) Status(ctx context.Context, site string) (SiteStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+c.L.AdminAddr(site)+"/status", nil)
	if err != nil {
		return SiteStatus{}, err
	}
	req.Header.Set("Authorization", "Bearer "+c.L.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return SiteStatus{}, fmt.Errorf("faultsched: %s /status: %w", site, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return SiteStatus{}, fmt.Errorf("faultsched: %s /status: %s: %s", site, resp.Status, body)
	}
	var st SiteStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return SiteStatus{}, fmt.Errorf("faultsched: %s /status: %w", site, err)
	}
	return st, nil
}

// Command runs `metaq-server <args> -f <site's server.ini>` at the site, as
// an operator there would, and returns its output.
func (c *Cluster) Command(ctx context.Context, site string, timeout time.Duration, args ...string) (string, error) {
	args = append(args, "-f", filepath.Join(c.L.Conf(site), "server.ini"))
	return c.runTimed(ctx, "metaq-server", timeout, args...)
}

// runTimed runs the program named (from c.Bin) with args, killed after
// timeout, and returns its output (stdout and stderr together, trimmed);
// a timeout is named in the error.
//
// The output goes to a file, not a pipe: with a pipe, a goroutine of this
// process copies it, and Wait gives that goroutine WaitDelay after the
// program exits before it closes the pipe; a harness starved of CPU (three
// schedules at once on a loaded machine) lost a failed command's whole
// output so, and the checker saw a command that failed without a cause.
// A file needs no reader while the program runs.
func (c *Cluster) runTimed(ctx context.Context, program string, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f, err := os.CreateTemp("", "faultsched-"+program+"-*.out")
	if err != nil {
		return "", fmt.Errorf("faultsched: output file for %s: %w", program, err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	cmd := exec.CommandContext(ctx, filepath.Join(c.Bin, program), args...)
	cmd.WaitDelay = 2 * time.Second
	cmd.Stdout, cmd.Stderr = f, f
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (no answer in %v)", ctx.Err(), timeout)
	}
	out, rerr := os.ReadFile(f.Name())
	if rerr != nil {
		err = errors.Join(err, fmt.Errorf("faultsched: read the output of %s: %w", program, rerr))
	}
	return strings.TrimSpace(string(out)), err
}

// Close kills every site process and ZooKeeper and closes the proxies.
func (c *Cluster) Close() error {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	var errs []error
	for _, s := range Sites {
		if c.Running(s) {
			_ = c.Pause(s, false)
			if err := c.Kill(s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	c.Links.Close()
	c.stopNATS()
	for _, s := range Sites {
		if !c.ZKDown(s) {
			if err := c.StopZK(s); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := c.unmountDisks(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
