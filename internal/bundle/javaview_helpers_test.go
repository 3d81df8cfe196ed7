package bundle

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"metaq/broker/registry"
	"metaq/internal/testutil"
)

// javaViewGone is a url the Java-producer view tests' view named once for
// broker id 0: a bundle since dead.
const javaViewGone = "meta://127.0.0.1:1"

// javaView is the site view the Java-producer re-read tests put MetaQ
// 1.4.6's producer on: a view of a test root under root+"-view-x", where
// broker id 0 moves between javaViewGone and its url. Its Dead reports
// javaViewGone while dead is set, which makes the view wake the producer.
type javaView struct {
	t    *testing.T
	v    *registry.SiteView
	root string
	dead atomic.Bool
}

// newJavaView builds the view of e's root once brokers bundles have
// registered topic orders there, and names javaViewGone, then url, for
// broker id 0: the producer started next may hold both.
func newJavaView(t *testing.T, e *testEnv, brokers int, url string) *javaView {
	t.Helper()
	zc := zkClient(t, e)
	jv := &javaView{t: t, root: e.root + "-view-x"}
	t.Cleanup(func() { removeTree(e.zk, jv.root) })
	v, err := registry.NewSiteView(zc, registry.SiteViewOptions{ViewRoot: jv.root,
		Dead: func(u string) bool { return jv.dead.Load() && u == javaViewGone }})
	if err != nil {
		t.Fatal(err)
	}
	jv.v = v
	testutil.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		kids, err := zc.Children(t.Context(), e.root+"/brokers/topics-pub/orders")
		if err == nil && len(kids) < brokers {
			err = fmt.Errorf("%d of %d brokers registered topic orders: %v", len(kids), brokers, kids)
		}
		return err
	})
	jv.goneAndBack(url)
	return jv
}

// apply names target for broker id 0.
func (jv *javaView) apply(target string) {
	jv.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := jv.v.Apply(ctx, map[int]string{0: target}); err != nil {
		jv.t.Fatal(err)
	}
}

// goneAndBack names javaViewGone (not dead yet), then url again: the
// producer may now hold javaViewGone.
func (jv *javaView) goneAndBack(url string) {
	jv.t.Helper()
	jv.apply(javaViewGone)
	jv.apply(url)
}

// reread names url again while javaViewGone is dead, so the view wakes the
// producer to read the brokers again, and returns when it began.
func (jv *javaView) reread(url string) time.Time {
	jv.t.Helper()
	jv.dead.Store(true)
	at := time.Now()
	jv.apply(url)
	jv.dead.Store(false)
	return at
}
