package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/internal/bundle"
)

// The failover steps on metaq-server children in network namespaces: the
// operator's commands run as `metaq-server` inside the site's namespace,
// the producer is a child of this binary in gz's namespace (reaching bj and
// hf across the WAN), bj's replication is cut by blocking its port on the
// WAN links, and bj is lost with SIGKILL.

// Failover runs the -failover steps.
func (n *netnsDemo) Failover(ctx context.Context) error { return runFailover(ctx, n.out, n) }

func (n *netnsDemo) newProducer() *ackProducer {
	p := newAckProducer(sampleTopic, []string{"bj", "hf", "gz"}, n.addrs())
	p.runner = func(ctx context.Context) { n.runProducer(ctx, p) }
	return p
}

func (n *netnsDemo) producerWhere() string {
	return "from gz's namespace across the WAN"
}

func (n *netnsDemo) commandsRun() string {
	return "each $ command below runs as metaq-server inside the site's namespace"
}

// runProducer runs the failover producer in gz's namespace from p's
// position until ctx ends, recording the acknowledgements it reports.
func (n *netnsDemo) runProducer(ctx context.Context, p *ackProducer) {
	next, site := p.position()
	body, _ := json.Marshal(stepRequest{Op: "failover-produce", Addrs: n.addrs(), Order: p.order, Topic: p.topic, N: next, Site: site})
	cmd := nsCommand(n.site("gz").ns, n.self, internalStep, string(body))
	logf, err := os.OpenFile(filepath.Join(n.dir, "failover-producer.log"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		n.printf("failover producer: %v\n", err)
		return
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		n.printf("failover producer: %v\n", err)
		return
	}
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		case <-stopped:
		}
	}()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var a ackLine
		if json.Unmarshal(sc.Bytes(), &a) == nil {
			p.record(ack{seq: a.Seq, site: a.Site, at: time.Unix(0, a.At)})
		}
	}
	cmd.Wait()
	close(stopped)
}

func (n *netnsDemo) replAddr(site string) string {
	return net.JoinHostPort(n.site(site).ip, strconv.Itoa(nsReplPort))
}

func (n *netnsDemo) metaqAddr(site string) string { return n.site(site).metaqAddr() }

func (n *netnsDemo) confFile(site string) string {
	return filepath.Join(n.site(site).dir, "conf", "server.ini")
}

func (n *netnsDemo) tailDir(site string) string {
	return filepath.Join(n.site(site).dir, "data", "replication", "unreplicated")
}

func (n *netnsDemo) setMaster(site string) { n.master = site }

// serverCmd runs a metaq-server command inside site's namespace and
// returns its output.
func (n *netnsDemo) serverCmd(ctx context.Context, site string, args ...string) ([]byte, error) {
	cmd := nsCommand(n.site(site).ns, append([]string{n.binPath()}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return stdout.Bytes(), fmt.Errorf("metaq-server %s at %s: %v: %s", args[0], site, err, strings.TrimSpace(stderr.String()+stdout.String()))
		}
	case <-ctx.Done():
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return nil, ctx.Err()
	}
	return stdout.Bytes(), nil
}

func (n *netnsDemo) switchover(ctx context.Context, from, to string) (bundle.SwitchoverReport, error) {
	var rep bundle.SwitchoverReport
	out, err := n.serverCmd(ctx, from, "switchover", "-json", "-to", to, "-follow", n.replAddr(to), "-f", n.confFile(from))
	if err != nil {
		return rep, err
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("switchover at %s: answer %q: %w", from, out, err)
	}
	return rep, nil
}

func (n *netnsDemo) promote(ctx context.Context, site string, force bool) (bundle.PromoteReport, error) {
	var rep bundle.PromoteReport
	args := []string{"promote", "-json", "-f", n.confFile(site)}
	if force {
		args = append(args, "-force")
	}
	out, err := n.serverCmd(ctx, site, args...)
	if err != nil {
		for _, e := range []error{bundle.ErrMasterReachable, bundle.ErrSiblingAhead} {
			if strings.Contains(err.Error(), e.Error()) {
				return rep, fmt.Errorf("%w: %v", e, err)
			}
		}
		return rep, err
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("promote at %s: answer %q: %w", site, out, err)
	}
	return rep, nil
}

// blockReplication cuts site's replication port on every WAN link: the
// other sites' receivers hear nothing more from it, its MetaQ port still
// answers.
func (n *netnsDemo) blockReplication(site string, on bool) error {
	return n.wan.Block(site, nsReplPort, on)
}

// kill ends site's metaq-server with SIGKILL.
func (n *netnsDemo) kill(site string) (string, error) {
	c := n.site(site).proc
	pid := c.cmd.Process.Pid
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return "", fmt.Errorf("kill %s's metaq-server: %w", site, err)
	}
	<-c.done
	return fmt.Sprintf("%s's metaq-server (pid %d) was killed with SIGKILL", site, pid), nil
}

// startSlave starts site's metaq-server again as a slave.
func (n *netnsDemo) startSlave(ctx context.Context, site, props string) error {
	s := n.site(site)
	c, err := n.spawn(s.ns, "site "+site, filepath.Join(s.dir, "bundle-slave.log"),
		n.binPath(), "start", "slave", "-s", props, "-f", n.confFile(site), "-foreground")
	if err != nil {
		return err
	}
	s.proc, s.slave = c, true
	return n.waitListen(ctx, s.ns, s.metaqAddr(), c, 30*time.Second)
}

func (n *netnsDemo) held(ctx context.Context, site string) (map[int]bool, error) {
	var res heldResult
	if err := n.step(ctx, n.site(site).ns, stepRequest{Op: "held", Addr: n.metaqAddr(site), Topic: sampleTopic, N: 4, Timeout: time.Minute}, &res); err != nil {
		return nil, err
	}
	held := map[int]bool{}
	for _, s := range res.Seqs {
		held[s] = true
	}
	return held, nil
}

// sameAs compares the copies record for record, reading each from
// master's namespace across the WAN.
func (n *netnsDemo) sameAs(ctx context.Context, master string, others ...string) (uint32, int64, error) {
	addrs := map[string]string{master: n.metaqAddr(master)}
	for _, o := range others {
		addrs[o] = n.metaqAddr(o)
	}
	var cr compareResult
	if err := n.step(ctx, n.site(master).ns, stepRequest{Op: "compare", Addrs: addrs, Ref: master, Topic: sampleTopic, N: 4, Timeout: 60 * time.Second}, &cr); err != nil {
		return 0, 0, err
	}
	return cr.Sum, cr.Bytes, nil
}

// refusal sends one probe message to site from its own namespace.
func (n *netnsDemo) refusal(ctx context.Context, site string) (string, error) {
	var pr probeResult
	if err := n.step(ctx, n.site(site).ns, stepRequest{Op: "probe", Addr: n.metaqAddr(site), Topic: sampleTopic, Timeout: 10 * time.Second}, &pr); err != nil {
		return "", err
	}
	return putAnswer(pr.Refusal), nil
}

// putAnswer shortens a client's error for a refused put to the broker's
// status and reason, as "403: reason".
func putAnswer(err string) string {
	i := strings.LastIndex(err, "answered ")
	if i < 0 {
		return err
	}
	code, reason, _ := strings.Cut(err[i+len("answered "):], ":")
	if _, detail, ok := strings.Cut(reason, "Detail:"); ok {
		reason = detail
	}
	return code + ": " + strings.TrimSpace(reason)
}

// listUnreplicated runs `metaq-server unreplicated` for site.
func (n *netnsDemo) listUnreplicated(ctx context.Context, site string, w io.Writer) error {
	out, err := n.serverCmd(ctx, site, "unreplicated", "-f", n.confFile(site))
	if err != nil {
		return err
	}
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Fprintf(w, "      %s\n", l)
	}
	return nil
}
