package configsync

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"metaq/broker/config"
	"metaq/internal/testutil"
)

// TestConnectHonoursTLSAndCreds runs a NATS server that demands client
// certificates: a client with [nats] tlsCert/tlsKey/tlsCA gets in and can
// push, one without is refused, and a credentials file is actually read.
func TestConnectHonoursTLSAndCreds(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testutil.WriteCert(t, dir, "ca", true, nil, nil)
	testutil.WriteCert(t, dir, "server", false, ca, caKey)
	testutil.WriteCert(t, dir, "client", false, ca, caKey)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: filepath.Join(dir, "server.pem"),
		KeyFile: filepath.Join(dir, "server.key"), CaFile: filepath.Join(dir, "ca.pem"), Verify: true})
	must(t, err)
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 2})
	must(t, err)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	url := srv.ClientURL()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	good := config.NATS{TLSCert: filepath.Join(dir, "client.pem"), TLSKey: filepath.Join(dir, "client.key"),
		TLSCA: filepath.Join(dir, "ca.pem")}
	c, err := NewClient(ctx, ClientOptions{URL: url, NATS: good, SigningKey: testKey})
	must(t, err)
	defer c.Close()
	if _, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(""), Sites: nil}); err != nil {
		t.Fatal(err)
	}

	// No client certificate: the server refuses the handshake.
	if _, err := Connect(ctx, url, config.NATS{TLSCA: good.TLSCA}, "t", nil); err == nil {
		t.Fatal("connected without a client certificate")
	}
	// Half a key pair is a configuration error.
	if _, err := Connect(ctx, url, config.NATS{TLSCert: good.TLSCert}, "t", nil); err == nil || !strings.Contains(err.Error(), "together") {
		t.Fatalf("half key pair: %v", err)
	}
	// The credentials file is read (a missing one fails the connection).
	missing := filepath.Join(dir, "nope.creds")
	if _, err := Connect(ctx, url, config.NATS{CredsFile: missing, TLSCert: good.TLSCert, TLSKey: good.TLSKey, TLSCA: good.TLSCA}, "t", nil); err == nil {
		t.Fatal("connected with a missing credentials file")
	}
}

func TestConnectWaitsForServerUntilContextEnds(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t)) // nothing listens there
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Connect(ctx, "nats://"+addr, config.NATS{}, "t", nil)
	if err == nil || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("err %v after %v", err, time.Since(start))
	}
}

func TestShippedOverlayExampleLoads(t *testing.T) {
	base, err := os.ReadFile("../conf/server.ini")
	must(t, err)
	ov, err := os.ReadFile("../conf/site.ini.example")
	must(t, err)
	cfg, _, err := config.ParseWithOverlay("../conf/server.ini", base, "../conf/site.ini.example", ov)
	must(t, err)
	if cfg.Site.Name != "bj" || cfg.System.DataPath != "/var/lib/metaq/data" || !bytesEqual(cfg.Raw, base) {
		t.Fatalf("overlay not applied: site %q dataPath %q", cfg.Site.Name, cfg.System.DataPath)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func TestEmbeddedOptionsFor(t *testing.T) {
	cfg := &config.Server{System: config.System{ServerPort: 9000, DataPath: "/d"}}
	o := EmbeddedOptionsFor(cfg, nil)
	if o.Listen != "127.0.0.1:9004" || o.StoreDir != "/d/configsync-nats" || ServerURL(cfg) != "nats://127.0.0.1:9004" {
		t.Fatalf("%+v %s", o, ServerURL(cfg))
	}
	cfg.NATS.URL = "nats://127.0.0.1:4222"
	if ServerURL(cfg) != cfg.NATS.URL {
		t.Fatal(ServerURL(cfg))
	}
}

// TestConnectRetriesASlowHandshake: a server that accepts the connection
// but answers slower than the client's handshake bound (on a loaded host,
// more than nats.go's 2 s) is tried again until ctx ends, as one that does
// not listen yet is: the first connection here is held silent, the next
// reaches the server. Before, the first timeout failed Connect (and with
// it `configsync push` and a bundle's push client).
func TestConnectRetriesASlowHandshake(t *testing.T) {
	e := startNATS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	target := strings.TrimPrefix(e.ClientURL(), "nats://")
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	defer func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if i == 0 {
				continue // silent: the client's handshake times out
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, s)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, err := Connect(ctx, "nats://"+ln.Addr().String(), config.NATS{}, "t", nil)
	if err != nil {
		t.Fatalf("Connect through a first handshake that times out: %v", err)
	}
	nc.Close()
}
