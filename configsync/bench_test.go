package configsync

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPushThreeSites measures a push from publish until all three sites
// answered (topic added, file written and fsynced, reloaded). The rollout
// target is well under a second per push.
func BenchmarkPushThreeSites(b *testing.B) {
	e, err := StartEmbeddedNATS(EmbeddedOptions{Listen: "127.0.0.1:-1", StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	var sites []*site
	for i, n := range []string{"bj", "hf", "gz"} {
		sites = append(sites, newSiteB(b, n, i+1, e.ClientURL()))
	}
	c, err := NewClient(context.Background(), ClientOptions{URL: e.ClientURL(), SigningKey: testKey})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		rep, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(fmt.Sprintf("[topic=t%d]\n", i)),
			Sites: []string{"bj", "hf", "gz"}, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatalf("%v %+v", err, rep)
		}
	}
	b.StopTimer()
	for _, s := range sites {
		s.agent.Close()
	}
}
