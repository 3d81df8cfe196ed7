package faultsched

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"metaq/broker/client"
	"metaq/internal/testutil"
)

// zkAt puts the test's ZooKeeper at addr (the layout's address of a site's
// ZooKeeper) by relaying every connection to it until the test ends.
func zkAt(t *testing.T, addr, zkAddr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", zkAddr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
}

// siteLayout is a layout's ports (no files) with the test's ZooKeeper at
// site's ZooKeeper address, and the proxies of site, which name this
// test's process the site dialer.
func siteLayout(t *testing.T, site, dialer string) (*Layout, *Links) {
	t.Helper()
	zkAddr := testutil.ZooKeeper(t)
	base, err := freeBase()
	if err != nil {
		t.Fatal(err)
	}
	l := &Layout{Base: base}
	zkAt(t, l.ZKAddr(site), zkAddr)
	ls := NewLinks(func() map[int]string { return map[int]string{os.Getpid(): dialer} })
	t.Cleanup(ls.Close)
	if err := ls.ListenSite(l, site); err != nil {
		t.Fatal(err)
	}
	return l, ls
}

// held runs req in a goroutine and fails the test if it ends within
// 500 ms; the returned channel gets its error once it ends.
func held(t *testing.T, what string, req func() error) <-chan error {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- req() }()
	select {
	case err := <-ch:
		t.Fatalf("%s ended through the cut (err %v)", what, err)
	case <-time.After(500 * time.Millisecond):
	}
	return ch
}

// passes waits up to 15 s for a request to end without error.
func passes(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not end in 15 s", what)
	}
}

func async(req func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- req() }()
	return ch
}

// TestCutBetweenSitesHoldsTheirZooKeeperSessions: bj's session with hf's
// ZooKeeper (through the proxy hf gossips as its ensemble; this test's
// process is bj) crosses the bj-hf link: a cut between bj and hf holds a
// request on it until the heal, while hf's zk-cut, bj's zk-cut, a cut
// between gz and hf and a client-cut of hf do not.
func TestCutBetweenSitesHoldsTheirZooKeeperSessions(t *testing.T) {
	l, ls := siteLayout(t, "hf", "bj")
	conn, events, err := zk.Connect([]string{l.ZKProxyAddr("hf")}, 4*time.Second, zk.WithLogInfo(false),
		zk.WithLogger(zkQuiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.After(15 * time.Second)
	for session := false; !session; {
		select {
		case ev := <-events:
			session = ev.State == zk.StateHasSession
		case <-deadline:
			t.Fatal("no session with hf's ZooKeeper through its proxy in 15 s")
		}
	}
	exists := func() error {
		ok, _, err := conn.Exists("/")
		if err == nil && !ok {
			err = fmt.Errorf("/ does not exist")
		}
		return err
	}
	passes(t, "a request before any cut", async(exists))
	others := [][2]string{{"hf", "zk:hf"}, {"bj", "zk:bj"}, {"gz", "hf"}, {Clients, "hf"}}
	for _, p := range others {
		ls.Cut(p[0], p[1], true)
	}
	passes(t, "a request while other pairs are cut", async(exists))
	for _, p := range others {
		ls.Cut(p[0], p[1], false)
	}
	ls.Cut("hf", "bj", true)
	ch := held(t, "bj's request to hf's ZooKeeper", exists)
	ls.Cut("bj", "hf", false)
	passes(t, "bj's request to hf's ZooKeeper after the heal", ch)
}

// TestClientCutHoldsTheGoClientsZooKeeper: the workload's Go client
// reaches the site's ZooKeeper through the clients' proxy, so a client-cut
// of bj holds its ZooKeeper reads until the heal, and bj's zk-cut (its
// bundle's own session) and a client-cut of gz do not.
func TestClientCutHoldsTheGoClientsZooKeeper(t *testing.T) {
	l, ls := siteLayout(t, "bj", "bj")
	w := &Workload{L: l}
	cfg := w.goClientConfig("bj")
	cfg.Logger = testutil.Logger(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topics := func() error {
		_, err := c.Topics(ctx)
		return err
	}
	passes(t, "a read before any cut", async(topics))
	ls.Cut("bj", "zk:bj", true)
	ls.Cut(Clients, "gz", true)
	passes(t, "a read while bj's zk-cut and gz's client-cut are on", async(topics))
	ls.Cut("bj", "zk:bj", false)
	ls.Cut(Clients, "gz", false)
	ls.Cut(Clients, "bj", true)
	ch := held(t, "the Go client's ZooKeeper read", topics)
	ls.Cut(Clients, "bj", false)
	passes(t, "the Go client's ZooKeeper read after the heal", ch)
}

// zkQuiet drops the ZooKeeper library's lines (its goroutines may log
// after the test ended).
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}
