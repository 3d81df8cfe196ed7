package faultsched

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/internal/clock"
)

// configsync in the harness: a NATS server per site, joined by gateways as
// deploy/nats configures them (local-three-sites.sh's start_nats), the
// sites' agents on deploy/'s [nats] settings, and pushes run with the
// configsync command at a site, as an operator there would. The nemesis's
// push fault adds a topic; after the heal every site must run the last
// version published (Cluster.ConfigConverged).

// natsConf is deploy/nats/nats-server.conf with one server per site on
// loopback.
func (l *Layout) natsConf(site string) string {
	var gws strings.Builder
	for _, o := range Sites {
		// Through the harness's proxy, so that a cut between two sites
		// cuts their NATS gateways too.
		fmt.Fprintf(&gws, "    { name: %s, urls: [ nats://%s ] }\n", o, l.addr(o, offNATSGatewayProxy))
	}
	d := filepath.Join(l.Dir, "nats-"+site)
	return fmt.Sprintf(`server_name: nats-1-%[1]s
listen: %[2]s
jetstream {
  store_dir: %[3]s/jetstream
}
cluster {
  name: %[1]s
  listen: %[4]s
  # deploy/ lists the site's other two servers; here a site has one, and
  # JetStream's cluster mode wants a route: the server's own is ignored.
  routes: [ nats-route://%[4]s ]
}
gateway {
  name: %[1]s
  listen: %[5]s
  advertise: %[7]s
  gateways: [
%[6]s  ]
}
`, site, l.NATSAddr(site), d, l.addr(site, offNATSCluster), l.addr(site, offNATSGateway), gws.String(), l.addr(site, offNATSGatewayProxy))
}

// startNATS starts the site's NATS server (bin/nats-server) and waits
// until it accepts connections.
func (c *Cluster) startNATS(ctx context.Context, site string) error {
	d := filepath.Join(c.L.Dir, "nats-"+site)
	if err := os.MkdirAll(filepath.Join(d, "jetstream"), 0o755); err != nil {
		return fmt.Errorf("faultsched: NATS of %s: %w", site, err)
	}
	conf := filepath.Join(d, "nats-server.conf")
	if err := os.WriteFile(conf, []byte(c.L.natsConf(site)), 0o644); err != nil {
		return fmt.Errorf("faultsched: NATS of %s: %w", site, err)
	}
	out, err := os.Create(filepath.Join(d, "nats.log"))
	if err != nil {
		return fmt.Errorf("faultsched: NATS of %s: %w", site, err)
	}
	cmd := exec.Command(filepath.Join(c.Bin, "nats-server"), "-c", conf)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("faultsched: start NATS of %s: %w", site, err)
	}
	done := make(chan struct{})
	go func() { // ends when the process does (stopNATS kills it)
		cmd.Wait()
		out.Close()
		close(done)
	}()
	c.mu.Lock()
	c.nats[site] = &proc{cmd: cmd, done: done}
	c.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		nc, err := net.DialTimeout("tcp", c.L.NATSAddr(site), time.Second)
		if err == nil {
			nc.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("faultsched: NATS of %s exited at start; see %s", site, filepath.Join(d, "nats.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultsched: NATS of %s did not open %s in 10s", site, c.L.NATSAddr(site))
		}
	}
}

// stopNATS kills every NATS server the cluster started and waits for them.
func (c *Cluster) stopNATS() {
	c.mu.Lock()
	ps := c.nats
	c.nats = map[string]*proc{}
	c.mu.Unlock()
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

// configsync runs the configsync command with args, -f file and the
// site's NATS server, as an operator at site would, and returns its output.
func (c *Cluster) configsync(ctx context.Context, site, file string, timeout time.Duration, args ...string) (string, error) {
	args = append(args, "-f", file, "-nats", "nats://"+c.L.NATSAddr(site))
	return c.runTimed(ctx, "configsync", timeout, args...)
}

var publishedRE = regexp.MustCompile(`(?m)^published version (\d+)`)

// Push signs and publishes file (server.ini's bytes) with `configsync
// push` run at site, waiting up to wait for every site's answer, and
// returns the command's output and the version it published (0: none).
func (c *Cluster) Push(ctx context.Context, site string, file []byte, wait time.Duration) (string, int, error) {
	d := filepath.Join(c.L.Dir, "pushes")
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", 0, fmt.Errorf("faultsched: %w", err)
	}
	f, err := os.CreateTemp(d, "server-*.ini")
	if err != nil {
		return "", 0, fmt.Errorf("faultsched: %w", err)
	}
	_, werr := f.Write(file)
	if cerr := f.Close(); werr != nil || cerr != nil {
		return "", 0, fmt.Errorf("faultsched: write %s: %v %v", f.Name(), werr, cerr)
	}
	out, err := c.configsync(ctx, site, f.Name(), wait+15*time.Second, "push", "-key", c.L.PushKey(),
		"-sites", strings.Join(c.agents(), ","), "-timeout", wait.String())
	v := 0
	if m := publishedRE.FindStringSubmatch(out); m != nil {
		v, _ = strconv.Atoi(m[1])
	}
	return out, v, err
}

func (c *Cluster) agents() []string {
	var out []string
	for _, s := range Sites {
		out = append(out, c.L.Agent(s))
	}
	return out
}

// ConfigConverged says whether every site's agent runs the desired
// version, byte for byte, with no failed apply (`configsync status -json`
// at bj), and what the command printed.
func (c *Cluster) ConfigConverged(ctx context.Context) (bool, string) {
	out, err := c.configsync(ctx, Sites[0], filepath.Join(c.L.Conf(Sites[0]), "server.ini"), 15*time.Second, "status", "-json")
	if err != nil {
		return false, fmt.Sprintf("configsync status: %v: %s", err, out)
	}
	type siteState struct {
		Site    string `json:"site"`
		Version uint64 `json:"version"`
		SHA256  string `json:"sha256"`
		Error   string `json:"error"`
	}
	var st struct {
		Desired *siteState  `json:"desired"`
		Sites   []siteState `json:"sites"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return false, fmt.Sprintf("configsync status -json: %v: %s", err, out)
	}
	if st.Desired == nil {
		return false, "no desired version: " + out
	}
	var behind []string
	for _, a := range c.agents() {
		i := slices.IndexFunc(st.Sites, func(s siteState) bool { return s.Site == a })
		switch {
		case i < 0:
			behind = append(behind, a+" never reported")
		case st.Sites[i].Version != st.Desired.Version || st.Sites[i].SHA256 != st.Desired.SHA256 || st.Sites[i].Error != "":
			s := st.Sites[i]
			behind = append(behind, fmt.Sprintf("%s runs v%d (sha256 %.12s) %s", a, s.Version, s.SHA256, s.Error))
		}
	}
	if len(behind) > 0 {
		return false, fmt.Sprintf("desired v%d (sha256 %.12s); %s", st.Desired.Version, st.Desired.SHA256, strings.Join(behind, "; "))
	}
	return true, fmt.Sprintf("every site runs v%d", st.Desired.Version)
}

// firstPush publishes the layout's server.ini as the first version, as
// local-three-sites.sh up does: JetStream elects its meta leader across
// the gateways within seconds, so it is tried again for up to 30 s.
func (c *Cluster) firstPush(ctx context.Context) error {
	file, err := os.ReadFile(filepath.Join(c.L.Conf(Sites[0]), "server.ini"))
	if err != nil {
		return fmt.Errorf("faultsched: first push: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, v, err := c.Push(ctx, Sites[0], file, 10*time.Second)
		if err == nil && v > 0 {
			c.mu.Lock()
			c.pushed = file
			c.mu.Unlock()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("faultsched: first configsync push: %v: %s", err, out)
		}
		clock.Sleep(ctx, time.Second)
	}
}

// NextPush is the file the next push publishes: the last published one
// with one more topic (a topic rolled out without a restart).
func (c *Cluster) NextPush() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pushN++
	return append(append([]byte(nil), c.pushed...), fmt.Sprintf("\n[topic=chaos-push-%d]\nnumPartitions=1\n", c.pushN)...)
}

// Pushed records file as published.
func (c *Cluster) Pushed(file []byte) {
	c.mu.Lock()
	c.pushed = file
	c.mu.Unlock()
}
