package bundle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"metaq/broker/client"
	"metaq/internal/testutil"
)

// multiSiteRoot returns a fresh ZooKeeper root for a multi-site test and
// removes it, with the views of the given sites, from every ensemble in zks
// when the test ends.
func multiSiteRoot(t testing.TB, zks []string, sites ...string) string {
	b := make([]byte, 6)
	rand.Read(b)
	root := "/metaq-test-" + hex.EncodeToString(b)
	t.Cleanup(func() {
		for _, zk := range zks {
			removeTree(zk, root)
			for _, s := range sites {
				removeTree(zk, root+"-view-"+s)
			}
		}
	})
	return root
}

// consumeDistinct subscribes cons to topic, starts it and returns a function
// that waits until exactly n distinct payloads have arrived.
func consumeDistinct(t *testing.T, ctx context.Context, cons *client.Consumer, topic string) func(n int, within time.Duration) {
	t.Helper()
	var mu sync.Mutex
	got := map[string]bool{}
	if err := cons.Subscribe(topic, func(_ context.Context, m *client.Message) error {
		mu.Lock()
		got[string(m.Payload)] = true
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return func(n int, within time.Duration) {
		t.Helper()
		testutil.Eventually(t, within, 50*time.Millisecond, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) != n {
				return fmt.Errorf("consumed %d of %d", len(got), n)
			}
			return nil
		})
	}
}
