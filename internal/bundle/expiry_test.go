package bundle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"metaq/broker/registry/zktest"
	"metaq/internal/testutil"
)

// TestSessionExpiryReregistersBundle expires the bundle's ZooKeeper session
// from outside and checks that the broker comes back in ZooKeeper with every
// node: its own, the configured topic and a topic first registered by a put
// (pattern section), owned by the new session; producers then find it again.
func TestSessionExpiryReregistersBundle(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=2\n\n[topic=log-*]\nnumPartitions=3\n")
	tap := &zktest.Tap{}
	b, err := New(Options{
		ConfigPath: e.ini, Logger: testutil.Logger(t, slog.LevelInfo),
		ListenAddr: "127.0.0.1:" + strconv.Itoa(e.port), AdminAddr: "off",
		ZooKeeperDialer: tap.Dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	ctx := context.Background()
	zk := zkClient(t, e)
	p := zk.Paths()

	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, _, err := mc.put("log-a", 2, []byte("first")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		_, _, err := zk.Get(ctx, p.Topics()+"/log-a/0-m")
		return err
	})

	nodes := map[string]string{
		p.BrokerID(0):                "meta://127.0.0.1:" + strconv.Itoa(e.port),
		p.Broker(0, -1):              "meta://127.0.0.1:" + strconv.Itoa(e.port),
		p.MasterConfigChecksum(0):    strconv.FormatUint(uint64(b.Config().Checksum), 10),
		p.Topics() + "/e2e/0-m":      "2",
		p.TopicsPub() + "/e2e/0-m":   `{"numParts":2,"broker":"0-m"}`,
		p.TopicsSub() + "/e2e/0-m":   `{"numParts":2,"broker":"0-m"}`,
		p.Topics() + "/log-a/0-m":    "3",
		p.TopicsPub() + "/log-a/0-m": `{"numParts":3,"broker":"0-m"}`,
		p.TopicsSub() + "/log-a/0-m": `{"numParts":3,"broker":"0-m"}`,
	}
	oldSession := b.Registry.SessionID()
	session, passwd := tap.Credentials()
	if session != oldSession {
		t.Fatalf("tap saw session 0x%x, registry has 0x%x", session, oldSession)
	}
	if err := zktest.ExpireSession(e.zk, session, passwd); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
		now := b.Registry.SessionID()
		if now == oldSession || now == 0 {
			return errors.New("no new session yet")
		}
		for path, want := range nodes {
			data, st, err := zk.Get(ctx, path)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if string(data) != want {
				return fmt.Errorf("%s = %q, want %q", path, data, want)
			}
			if path != p.BrokerID(0) && st.EphemeralOwner != now {
				return fmt.Errorf("%s owned by 0x%x, want the new session 0x%x", path, st.EphemeralOwner, now)
			}
		}
		return nil
	})

	// The broker kept serving, and a producer written to the spec finds it.
	prod, err := newSpecProducer(ctx, zk, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer prod.close()
	if err := prod.send([]byte("after expiry")); err != nil {
		t.Fatal(err)
	}
}
