package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestSiteView builds a view over a real root holding a master and a slave
// of broker 1 and a master of broker 2, then flips broker 1's entry between
// the slave and the master, checking the znodes a Java consumer reads and the
// child event that makes it re-read them.
func TestSiteView(t *testing.T) {
	root := testRoot(t)
	viewRoot := root + "-view-hf"
	cleanupRoot(t, root)
	cleanupRoot(t, viewRoot)
	ctx := context.Background()

	reg := func(id, slave, port, parts int) *Registry {
		o := testOptions(t, root)
		o.BrokerID, o.SlaveID, o.Slave, o.Port = id, slave, slave >= 0, port
		r := newRegistry(t, o)
		if err := r.RegisterBroker(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterTopic(ctx, "t", parts, true, true); err != nil {
			t.Fatal(err)
		}
		return r
	}
	master1 := reg(1, -1, 8123, 2)
	slave1 := reg(1, 0, 9123, 2)
	master2 := reg(2, -1, 8125, 4)
	_ = slave1
	tool := newRegistry(t, testOptions(t, root))
	v, err := NewSiteView(tool, SiteViewOptions{ViewRoot: viewRoot})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSiteView(tool, SiteViewOptions{ViewRoot: root}); err == nil {
		t.Fatal("a view over its own root was accepted")
	}
	vp := Paths{Root: viewRoot}
	masterURL, slaveURL, master2URL := "meta://127.0.0.1:8123", "meta://127.0.0.1:9123", "meta://127.0.0.1:8125"

	expect := func(want map[string]string, absent ...string) {
		t.Helper()
		for p, val := range want {
			got, _, err := tool.Get(ctx, p)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if string(got) != val {
				t.Fatalf("%s = %q, want %q", p, got, val)
			}
		}
		for _, p := range absent {
			if ok, _, err := tool.Exists(ctx, p); err != nil || ok {
				t.Fatalf("%s exists=%v err=%v, want absent", p, ok, err)
			}
		}
	}

	// hf's replica is healthy: broker 1 points at it; broker 2 follows ZooKeeper.
	changes, err := v.Apply(ctx, map[int]string{1: slaveURL})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(changes) != fmt.Sprint([]SiteViewChange{{1, "", slaveURL}, {2, "", master2URL}}) {
		t.Fatalf("changes %+v", changes)
	}
	expect(map[string]string{
		vp.Broker(1, -1):          slaveURL,
		vp.BrokerID(1):            slaveURL,
		vp.Broker(2, -1):          master2URL,
		vp.TopicsSub() + "/t/1-m": `{"numParts":2,"broker":"1-m"}`,
		vp.TopicsSub() + "/t/2-m": `{"numParts":4,"broker":"2-m"}`,
		vp.TopicsPub() + "/t/1-m": `{"numParts":2,"broker":"1-m"}`,
		vp.Topics() + "/t/2-m":    "4",
	}, vp.Broker(1, 0), vp.TopicsSub()+"/t/1-s0")

	// A consumer watching topics-sub/t must be woken when broker 1 flips to
	// the master, with its partition list unchanged.
	kids, watch, err := tool.ChildrenW(ctx, vp.TopicsSub()+"/t")
	if err != nil {
		t.Fatal(err)
	}
	changes, err = v.Apply(ctx, map[int]string{1: masterURL})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].BrokerID != 1 || changes[0].New != masterURL {
		t.Fatalf("flip changes %+v", changes)
	}
	select {
	case <-watch:
	case <-time.After(5 * time.Second):
		t.Fatal("no children event on topics-sub/t after the flip")
	}
	expect(map[string]string{vp.Broker(1, -1): masterURL, vp.BrokerID(1): masterURL,
		vp.TopicsSub() + "/t/1-m": `{"numParts":2,"broker":"1-m"}`})
	after, _ := tool.Children(ctx, vp.TopicsSub()+"/t")
	if got, want := partitionStrings(t, tool, vp, after), partitionStrings(t, tool, vp, kids); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("partition list changed across the flip: %v -> %v", want, got)
	}

	// Nothing changed: no writes, no event.
	_, watch, err = tool.ChildrenW(ctx, vp.TopicsSub()+"/t")
	if err != nil {
		t.Fatal(err)
	}
	if changes, err = v.Apply(ctx, map[int]string{1: masterURL}); err != nil || len(changes) != 0 {
		t.Fatalf("steady apply: %+v %v", changes, err)
	}
	select {
	case <-watch:
		t.Fatal("steady apply woke consumers")
	case <-time.After(300 * time.Millisecond):
	}

	// Back to hf and flipping again toggles the marker the other way.
	if _, err := v.Apply(ctx, map[int]string{1: slaveURL}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Apply(ctx, map[int]string{1: masterURL}); err != nil {
		t.Fatal(err)
	}
	expect(map[string]string{vp.Broker(1, -1): masterURL})

	// The real master stops and nobody gives a target: the view falls back
	// to the slave, as the Java client would; its topics stay.
	master1.Close()
	testutil_eventually(t, func() error {
		if _, err := v.Apply(ctx, nil); err != nil {
			return err
		}
		got, _, err := tool.Get(ctx, vp.Broker(1, -1))
		if err != nil || string(got) != slaveURL {
			return fmt.Errorf("ids/1/master = %q %v", got, err)
		}
		return nil
	})
	expect(map[string]string{vp.TopicsSub() + "/t/1-m": `{"numParts":2,"broker":"1-m"}`})

	// Broker 2 goes away entirely: the view drops it.
	master2.Close()
	testutil_eventually(t, func() error {
		if _, err := v.Apply(ctx, nil); err != nil {
			return err
		}
		if ok, _, _ := tool.Exists(ctx, vp.BrokerID(2)); ok {
			return errors.New("ids/2 still in the view")
		}
		return nil
	})
	expect(nil, vp.TopicsSub()+"/t/2-m", vp.TopicsPub()+"/t/2-m", vp.Topics()+"/t/2-m")

	// Offsets written by a consumer under the view root are read back there.
	if err := tool.SetPersistent(ctx, vp.ConsumerOffsets("audit", "t")+"/1-0", []byte("-1-25")); err != nil {
		t.Fatal(err)
	}
	// A group moving onto the view keeps its offsets: seeded from the real
	// root, except where the view already has one.
	if err := tool.CommitOffset(ctx, "audit", "t", 1, 0, 7, 999); err != nil {
		t.Fatal(err)
	}
	if err := tool.CommitOffset(ctx, "audit", "t", 1, 1, 8, 1234); err != nil {
		t.Fatal(err)
	}
	if n, err := v.SeedOffsets(ctx, "audit"); err != nil || n != 1 {
		t.Fatalf("seed: %d %v", n, err)
	}
	expect(map[string]string{vp.ConsumerOffsets("audit", "t") + "/1-0": "-1-25", vp.ConsumerOffsets("audit", "t") + "/1-1": "8-1234"})
	if err := tool.Delete(ctx, vp.ConsumerOffsets("audit", "t")+"/1-1"); err != nil {
		t.Fatal(err)
	}

	offs, err := tool.OffsetsUnder(ctx, viewRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 1 || offs[0].Root != viewRoot || offs[0].Group != "audit" || offs[0].Offset.Offset != 25 || offs[0].BrokerID != 1 {
		t.Fatalf("offsets under view: %+v", offs)
	}
}

// partitionStrings is what MetaZookeeper.getPartitionStringsForSubTopics
// derives from a topics-sub children list: children of the form X-Y give
// X-0..X-(n-1); others are skipped.
func partitionStrings(t *testing.T, r *Registry, p Paths, kids []string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, k := range kids {
		id, _, ok := ParseBrokerString(k)
		if !ok {
			continue
		}
		data, _, err := r.Get(context.Background(), p.TopicsSub()+"/t/"+k)
		if err != nil {
			t.Fatal(err)
		}
		n, err := ParseTopicValue(data)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			s := fmt.Sprintf("%d-%d", id, i)
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func testutil_eventually(t *testing.T, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
