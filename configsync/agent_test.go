package configsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"metaq/broker/config"
	"metaq/internal/testutil"
)

func TestPushAddsTopicAtEverySite(t *testing.T) {
	c, sites := threeSites(t)
	v1 := baseIni("\n;; added by the rollout\n[topic=orders]\nnumPartitions=4\n")
	rep, err := push(t, c, v1)
	must(t, err)
	if rep.Version != 1 || rep.Previous != 0 || len(rep.Missing) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range sites {
		res := rep.Results[s.name]
		if !res.OK || res.Version != 1 || res.Running != 1 {
			t.Fatalf("%s: result %+v", s.name, res)
		}
		if len(res.TopicsAdded) != 1 || res.TopicsAdded[0] != "orders" {
			t.Fatalf("%s: topics added %v", s.name, res.TopicsAdded)
		}
		if len(res.PendingRestart) != 0 {
			t.Fatalf("%s: a topic-only change left a pending restart: %v", s.name, res.PendingRestart)
		}
		// Push answered only after every site applied, so no wait here.
		if !s.rec.hasTopic("orders") {
			t.Fatalf("%s: reloader did not get topic orders", s.name)
		}
		if tp, _ := s.rec.current().TopicFor("orders"); tp.NumPartitions != 4 {
			t.Fatalf("%s: orders has %d partitions", s.name, tp.NumPartitions)
		}
		// The exact bytes, comments included, are on disk; the previous
		// file is kept.
		sameBytes(t, s.name+" server.ini", s.file(t), v1)
		prev, err := os.ReadFile(s.path + ".prev")
		must(t, err)
		sameBytes(t, s.name+" server.ini.prev", prev, baseIni(""))
	}
	st, err := c.Status(context.Background())
	must(t, err)
	if st.Desired == nil || st.Desired.Version != 1 || st.Desired.SHA256 != hashHex(v1) {
		t.Fatalf("desired %+v", st.Desired)
	}
	if len(st.Sites) != 3 {
		t.Fatalf("status sites %+v", st.Sites)
	}
	for _, s := range st.Sites {
		if s.Version != 1 || s.SHA256 != hashHex(v1) || s.AppliedAt.IsZero() || s.Error != "" {
			t.Fatalf("status %+v", s)
		}
	}

	// A second push keeps server.ini.v1 and reports a changed topic.
	v2 := baseIni("\n[topic=orders]\nnumPartitions=8\n")
	rep, err = push(t, c, v2)
	must(t, err)
	for _, s := range sites {
		res := rep.Results[s.name]
		if !res.OK || res.Version != 2 || len(res.TopicsChanged) != 1 || res.TopicsChanged[0] != "orders" {
			t.Fatalf("%s: result %+v", s.name, res)
		}
		old, err := os.ReadFile(s.path + ".v1")
		must(t, err)
		sameBytes(t, s.name+" server.ini.v1", old, v1)
	}
}

func TestPushPlanShowsDiffPerSite(t *testing.T) {
	c, _ := threeSites(t)
	_, err := push(t, c, baseIni("[topic=a]\n"))
	must(t, err)
	var plans []SitePlan
	ctx := context.Background()
	rep, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni("[topic=b]\n"), DryRun: true,
		OnPlan: func(p []SitePlan) { plans = p }})
	must(t, err)
	if len(plans) != 3 || !rep.DryRun {
		t.Fatalf("plans %+v", plans)
	}
	for _, p := range plans {
		if p.Running != 1 || strings.Join(p.Changes.TopicsAdded, ",") != "b" || strings.Join(p.Changes.TopicsRemoved, ",") != "a" {
			t.Fatalf("plan %+v", p)
		}
	}
	// A dry run publishes nothing.
	d, err := c.Desired(ctx)
	must(t, err)
	if d.Version != 1 {
		t.Fatalf("dry run published version %d", d.Version)
	}
}

func TestSiteDownCatchesUpOnReturn(t *testing.T) {
	c, sites := threeSites(t)
	gz := sites[2]
	gz.stop()
	v1 := baseIni("[topic=late]\n")
	ctx := context.Background()
	rep, err := c.Push(ctx, PushOptions{File: "server.ini", Data: v1, Timeout: 1500 * time.Millisecond})
	wantErr(t, err, ErrSitesFailed)
	if strings.Join(rep.Missing, ",") != "gz" || strings.Join(rep.Failed(), ",") != "gz" {
		t.Fatalf("missing %v failed %v", rep.Missing, rep.Failed())
	}
	if !rep.Results["bj"].OK || !rep.Results["hf"].OK {
		t.Fatalf("results %+v", rep.Results)
	}
	sameBytes(t, "gz while down", gz.file(t), baseIni(""))

	// The status of a site that is down is still there (from the bucket).
	st, err := c.Status(ctx)
	must(t, err)
	for _, s := range st.Sites {
		if s.Site == "gz" && s.Version != 0 {
			t.Fatalf("gz status %+v", s)
		}
	}

	gz.start(t) // the bundle comes back with its old file
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !gz.rec.hasTopic("late") {
			return errors.New("gz has not applied version 1")
		}
		return nil
	})
	sameBytes(t, "gz after return", gz.file(t), v1)
	// Now a push of the same bytes reports every site on version 1.
	rep, err = push(t, c, v1)
	must(t, err)
	if !rep.Unchanged || rep.Version != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, s := range sites {
		if r := rep.Results[s.name]; !r.OK || r.Running != 1 {
			t.Fatalf("%s: %+v", s.name, r)
		}
	}
}

func TestSiteStartingDuringPushAnswers(t *testing.T) {
	c, sites := threeSites(t)
	hf := sites[1]
	hf.stop()
	done := make(chan error, 1)
	var rep *PushReport
	go func() {
		var err error
		rep, err = c.Push(context.Background(), PushOptions{File: "server.ini", Data: baseIni("[topic=x]\n"), Timeout: 10 * time.Second})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the push reach the two live sites first
	hf.start(t)
	must(t, <-done)
	if r := rep.Results["hf"]; !r.OK || r.Version != 1 {
		t.Fatalf("hf %+v", r)
	}
}

func TestInvalidPushChangesNothing(t *testing.T) {
	c, sites := threeSites(t)
	bad := []byte(strings.Replace(string(baseIni("[topic=new]\n")), "unflushInterval=1000\n", "unflushInterval=soon\n", 1))
	_, err := push(t, c, bad)
	if err == nil {
		t.Fatal("invalid file was accepted")
	}
	// Same error as the broker's own loader.
	_, _, perr := config.Parse("server.ini", bad)
	if perr == nil || !strings.Contains(err.Error(), perr.Error()) {
		t.Fatalf("push error %q does not carry the loader's %q", err, perr)
	}
	if _, err := c.Desired(context.Background()); !errors.Is(err, ErrNoDesired) {
		t.Fatalf("desired after invalid push: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	for _, s := range sites {
		sameBytes(t, s.name, s.file(t), baseIni(""))
		if n := s.rec.callCount(); n != 0 {
			t.Fatalf("%s: reloader called %d times", s.name, n)
		}
	}
}

func TestConflictingPushes(t *testing.T) {
	c, _ := threeSites(t)
	ctx := context.Background()
	_, err := push(t, c, baseIni("[topic=a]\n"))
	must(t, err)

	// Deterministic race: both read version 1, the other client writes
	// first, ours must lose with a clear error and write nothing.
	cur, rev, err := c.desired(ctx)
	must(t, err)
	other := newClient(t, c.nc.ConnectedUrl())
	_, err = push(t, other, baseIni("[topic=b]\n"))
	must(t, err)
	v := &Version{Version: cur.Version + 1, Data: baseIni("[topic=c]\n")}
	v.SHA256 = hashHex(v.Data)
	err = c.publish(ctx, v, cur, rev)
	wantErr(t, err, ErrConflict)
	if !strings.Contains(err.Error(), "now holds version 2") {
		t.Fatalf("conflict error lacks detail: %v", err)
	}
	d, err := c.Desired(ctx)
	must(t, err)
	if d.Version != 2 || d.SHA256 != hashHex(baseIni("[topic=b]\n")) {
		t.Fatalf("desired %d %s", d.Version, d.SHA256)
	}

	// Real concurrency: every push either wins with its own version or gets
	// ErrConflict; no two winners share a version.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	reps := make([]*PushReport, 4)
	for i := range errs {
		cl := newClient(t, c.nc.ConnectedUrl())
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[i], errs[i] = push(t, cl, baseIni(fmt.Sprintf("[topic=p%d]\n", i)))
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	wins := 0
	for i, err := range errs {
		if err != nil {
			wantErr(t, err, ErrConflict)
			continue
		}
		wins++
		if seen[reps[i].Version] {
			t.Fatalf("two pushes got version %d", reps[i].Version)
		}
		seen[reps[i].Version] = true
	}
	if wins == 0 {
		t.Fatal("no push won")
	}
}

func TestRollback(t *testing.T) {
	c, sites := threeSites(t)
	ctx := context.Background()
	v1, v2 := baseIni("[topic=a]\n"), baseIni("[topic=a]\n[topic=b]\n")
	_, err := push(t, c, v1)
	must(t, err)
	_, err = push(t, c, v2)
	must(t, err)

	rep, err := c.Rollback(ctx, RollbackOptions{Timeout: 5 * time.Second})
	must(t, err)
	if rep.Version != 3 || rep.RollbackOf != 1 {
		t.Fatalf("rollback report %+v", rep)
	}
	for _, s := range sites {
		r := rep.Results[s.name]
		if !r.OK || strings.Join(r.TopicsRemoved, ",") != "b" {
			t.Fatalf("%s: %+v", s.name, r)
		}
		sameBytes(t, s.name, s.file(t), v1)
		if s.rec.hasTopic("b") {
			t.Fatalf("%s still has topic b", s.name)
		}
	}
	// History is kept: version 2 is still there, and rollback -to 2 works.
	rep, err = c.Rollback(ctx, RollbackOptions{To: 2, Timeout: 5 * time.Second})
	must(t, err)
	if rep.Version != 4 || rep.RollbackOf != 2 {
		t.Fatalf("rollback report %+v", rep)
	}
	for _, s := range sites {
		sameBytes(t, s.name, s.file(t), v2)
	}
	d, err := c.Desired(ctx)
	must(t, err)
	if d.RollbackOf != 2 || d.Version != 4 {
		t.Fatalf("desired %+v", d)
	}
	if _, err := c.Rollback(ctx, RollbackOptions{To: 9}); err == nil {
		t.Fatal("rollback to a future version accepted")
	}
	// The copy of version 1 is found in the desired key's history when
	// version.1 is gone.
	must(t, c.kv.Delete(ctx, versionKey(1)))
	v, err := c.Version(ctx, 1)
	must(t, err)
	sameBytes(t, "version 1 from history", v.Data, v1)
}

func TestFailingApplyKeepsPreviousFile(t *testing.T) {
	c, sites := threeSites(t)
	hf := sites[1]
	hf.rec.setFail(errors.New("store: data dir is read-only"))
	rep, err := push(t, c, baseIni("[topic=n]\n"))
	wantErr(t, err, ErrSitesFailed)
	r := rep.Results["hf"]
	if r.OK || !strings.Contains(r.Error, "data dir is read-only") || r.Running != 0 {
		t.Fatalf("hf result %+v", r)
	}
	sameBytes(t, "hf keeps its file", hf.file(t), baseIni(""))
	if hf.rec.hasTopic("n") {
		t.Fatal("hf reloader has the new topic")
	}
	for _, s := range []*site{sites[0], sites[2]} {
		if !rep.Results[s.name].OK {
			t.Fatalf("%s: %+v", s.name, rep.Results[s.name])
		}
	}
	st, err := c.Status(context.Background())
	must(t, err)
	for _, s := range st.Sites {
		if s.Site == "hf" && (s.Version != 0 || s.FailedVersion != 1 || !strings.Contains(s.Error, "read-only")) {
			t.Fatalf("hf status %+v", s)
		}
	}
	// A version the site cannot validate with its overlay fails the same
	// way, before the reloader is called.
	hf.rec.setFail(nil)
	calls := hf.rec.callCount()
	must(t, os.WriteFile(filepath.Join(hf.dir, "site.ini"), []byte("[system]\nbrokerId=1\n[site]\nname=hf\n[topic=x]\nnumPartitions=zero\n"), 0o644))
	rep, err = push(t, c, baseIni("[topic=m]\n"))
	wantErr(t, err, ErrSitesFailed)
	if r := rep.Results["hf"]; r.OK || !strings.Contains(r.Error, "validate version 2") {
		t.Fatalf("hf %+v", r)
	}
	if hf.rec.callCount() != calls {
		t.Fatal("reloader called for an invalid version")
	}
	sameBytes(t, "hf keeps its file", hf.file(t), baseIni(""))
}

func TestOverlayKeepsSiteSettings(t *testing.T) {
	c, sites := threeSites(t)
	// The pushed file carries other values for keys the overlays set.
	v1 := []byte(strings.Replace(string(baseIni("[topic=o]\n")), "serverPort=18123", "serverPort=18200\nhostName=shared.example", 1))
	rep, err := push(t, c, v1)
	must(t, err)
	for i, s := range sites {
		cfg := s.rec.current()
		if cfg.Site.Name != s.name || cfg.System.BrokerID != i+1 || cfg.System.ServerPort != 19000+(i+1)*10 ||
			cfg.System.DataPath != "/var/metaq/"+s.name {
			t.Fatalf("%s: site settings lost: site=%q brokerId=%d port=%d data=%q", s.name, cfg.Site.Name,
				cfg.System.BrokerID, cfg.System.ServerPort, cfg.System.DataPath)
		}
		if cfg.System.HostName != "shared.example" {
			t.Fatalf("%s: shared key not applied: %q", s.name, cfg.System.HostName)
		}
		ov, err := os.ReadFile(filepath.Join(s.dir, "site.ini"))
		must(t, err)
		sameBytes(t, s.name+" overlay", ov, overlayIni(s.name, i+1))
		// The overlay wins over the pushed serverPort, so no restart is due.
		if contains(rep.Results[s.name].PendingRestart, "serverPort") {
			t.Fatalf("%s: pending %v", s.name, rep.Results[s.name].PendingRestart)
		}
	}
}

func TestRestartKeysReportedAsPending(t *testing.T) {
	c, sites := threeSites(t)
	v1 := []byte(strings.Replace(string(baseIni("")), "zk.zkConnect=127.0.0.1:2181", "zk.zkConnect=127.0.0.1:2182", 1))
	rep, err := push(t, c, v1)
	must(t, err)
	for _, s := range sites {
		r := rep.Results[s.name]
		if !r.OK || !contains(r.RestartKeys, "zkConnect") || !contains(r.PendingRestart, "zkConnect") {
			t.Fatalf("%s: %+v", s.name, r)
		}
	}
	st, err := c.Status(context.Background())
	must(t, err)
	for _, s := range st.Sites {
		if !contains(s.PendingRestart, "zkConnect") {
			t.Fatalf("status %+v", s)
		}
	}
	// Reverting the key clears the pending restart: it is computed against
	// what the process started with.
	rep, err = push(t, c, baseIni(""))
	must(t, err)
	for _, s := range sites {
		if r := rep.Results[s.name]; !r.OK || len(r.PendingRestart) != 0 {
			t.Fatalf("%s: %+v", s.name, r)
		}
	}
}

func TestAgentAppliesOnlyItsBucket(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	ctx := context.Background()
	other, err := NewClient(ctx, ClientOptions{URL: e.ClientURL(), NATS: config.NATS{Bucket: "other_bucket"}, SigningKey: testKey})
	must(t, err)
	defer other.Close()
	rep, err := other.Push(ctx, PushOptions{File: "x", Data: baseIni("[topic=foreign]\n"), Sites: []string{"bj"}, Timeout: 700 * time.Millisecond})
	wantErr(t, err, ErrSitesFailed)
	_ = rep

	// A forged request on the site's subject makes the agent read its own
	// bucket only; it carries no configuration it could apply.
	nc, err := nats.Connect(e.ClientURL())
	must(t, err)
	defer nc.Close()
	b, _ := json.Marshal(request{Version: 1})
	_, err = nc.Request("metaq.config.bj", b, 500*time.Millisecond)
	if err == nil {
		t.Fatal("agent answered for a version its bucket does not hold")
	}
	sameBytes(t, "bj", s.file(t), baseIni(""))
	if s.rec.callCount() != 0 {
		t.Fatal("reloader called")
	}
}

func TestAgentRestartKeepsVersion(t *testing.T) {
	c, sites := threeSites(t)
	v1 := baseIni("[topic=k]\n")
	_, err := push(t, c, v1)
	must(t, err)
	bj := sites[0]
	bj.stop()
	bj.start(t)
	// The file on disk is version 1: nothing to reload after the restart.
	time.Sleep(300 * time.Millisecond)
	if n := bj.rec.callCount(); n != 0 {
		t.Fatalf("reloaded %d times after restart", n)
	}
	if st := bj.agent.State(); st.Version != 1 || st.SHA256 != hashHex(v1) {
		t.Fatalf("state %+v", st)
	}
}

func TestAgentOptionsValidate(t *testing.T) {
	for name, o := range map[string]Options{
		"no path":      {Reloader: &recorder{}},
		"no reloader":  {ConfigPath: "x"},
		"bad site":     {ConfigPath: "x", Reloader: &recorder{}, Running: &config.Server{}, Site: "a.b"},
		"missing file": {ConfigPath: filepath.Join(t.TempDir(), "nope.ini"), Reloader: &recorder{}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewAgent(o); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestPruneBackups(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "server.ini")
	a := &Agent{o: Options{ConfigPath: p, KeepVersions: 2}}
	for i := 1; i <= 5; i++ {
		must(t, os.WriteFile(fmt.Sprintf("%s.v%d", p, i), nil, 0o644))
	}
	a.pruneBackups()
	for i := 1; i <= 5; i++ {
		_, err := os.Stat(fmt.Sprintf("%s.v%d", p, i))
		if (i >= 4) != (err == nil) {
			t.Fatalf("v%d: %v", i, err)
		}
	}
}

func TestDiffText(t *testing.T) {
	for name, tc := range map[string]struct{ a, b, want string }{
		"equal":            {"x\ny\n", "x\ny\n", ""},
		"added":            {"a\nb\n", "a\nb\nc\n", "--- old\n+++ new\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"},
		"changed":          {"a\nb\nc\nd\ne\nf\ng\n", "a\nb\nc\nD\ne\nf\ng\n", "--- old\n+++ new\n@@ -2,5 +2,5 @@\n b\n c\n-d\n+D\n e\n f\n"},
		"no final newline": {"a\nb", "a\nc", "--- old\n+++ new\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := DiffText("old", "new", []byte(tc.a), []byte(tc.b)); got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestAgentStartsBeforeNATS: a bundle starts while NATS is unreachable; its
// agent connects when the server appears and applies the desired version.
func TestAgentStartsBeforeNATS(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))
	store := t.TempDir()

	dir := t.TempDir()
	path := filepath.Join(dir, "server.ini")
	must(t, os.WriteFile(path, baseIni(""), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "site.ini"), overlayIni("bj", 1), 0o644))
	cfg, _, err := config.Load(path)
	must(t, err)
	rec := &recorder{cfg: cfg}
	a, err := NewAgent(Options{ConfigPath: path, Running: cfg, URL: "nats://" + addr, Reloader: rec, Logger: testutil.Logger(t, slog.LevelDebug)})
	must(t, err)
	must(t, a.Start(context.Background())) // does not wait for NATS
	defer a.Close()
	select {
	case <-a.Ready():
		t.Fatal("ready without a server")
	case <-time.After(300 * time.Millisecond):
	}

	e, err := StartEmbeddedNATS(EmbeddedOptions{Listen: addr, StoreDir: store})
	must(t, err)
	defer e.Close()
	c := newClient(t, e.ClientURL())
	_, err = push(t, c, baseIni("[topic=after]\n"))
	must(t, err) // no site known yet: nothing to wait for
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not connect")
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !rec.hasTopic("after") {
			return errors.New("not applied")
		}
		return nil
	})
}

func TestAgentStartRejectsMissingNATSFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.ini")
	must(t, os.WriteFile(path, baseIni(""), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "site.ini"), overlayIni("bj", 1), 0o644))
	a, err := NewAgent(Options{ConfigPath: path, URL: "nats://127.0.0.1:1", Reloader: &recorder{},
		NATS: config.NATS{CredsFile: filepath.Join(dir, "missing.creds")}})
	must(t, err)
	defer a.Close()
	if err := a.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "missing.creds") {
		t.Fatalf("start: %v", err)
	}
}

func TestStatusMarksSilentSiteStale(t *testing.T) {
	c, sites := threeSites(t)
	sites[0].stop()
	testutil.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		st, err := c.Status(context.Background())
		if err != nil {
			return err
		}
		for _, s := range st.Sites {
			if stale := s.Stale(time.Now()); stale != (s.Site == "bj") {
				return fmt.Errorf("%s stale=%v", s.Site, stale)
			}
		}
		return nil
	})
}

// TestStartBundleEmbedded: a single-machine bundle without [nats] url runs
// the embedded server and its agent; the command side reaches it at the
// embedded address and a push reaches the broker's reloader.
func TestStartBundleEmbedded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.ini")
	ini := strings.Replace(string(baseIni("")), "[site]\n", "[nats]\nembeddedListen=127.0.0.1:0\n\n[site]\n", 1)
	must(t, os.WriteFile(path, []byte(ini), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "site.ini"), overlayIni("solo", 1), 0o644))
	cfg, _, err := config.Load(path)
	must(t, err)
	rec := &recorder{cfg: cfg}
	b, err := StartBundle(context.Background(), BundleOptions{ConfigPath: path, Config: cfg, Reloader: rec,
		Embedded: EmbeddedOptions{StoreDir: t.TempDir()}})
	must(t, err)
	defer b.Close()
	if b.Embedded == nil {
		t.Fatal("no embedded server without [nats] url")
	}
	if strings.HasSuffix(b.Embedded.ClientURL(), ":4222") || strings.HasSuffix(b.Embedded.ClientURL(), ":0") {
		t.Fatalf("port 0 did not pick a free port: %s", b.Embedded.ClientURL())
	}
	<-b.Agent.Ready()
	c := newClient(t, b.Embedded.ClientURL())
	waitSitesKnown(t, c, "solo")
	v1 := []byte(strings.Replace(ini, "[topic=test]", "[topic=solo-topic]\n[topic=test]", 1))
	rep, err := push(t, c, v1)
	must(t, err)
	if !rep.Results["solo"].OK || !rec.hasTopic("solo-topic") {
		t.Fatalf("%+v", rep.Results)
	}
	b.Close()
	b.Close()
}

// TestPushLeavesHostsOwnKeys: a site that wrote its data directory and its
// dashboard token into server.ini itself (not into its overlay) refuses a
// version that would drop or change them, names them, and keeps its file;
// the other sites apply it.
func TestPushLeavesHostsOwnKeys(t *testing.T) {
	c, sites := threeSites(t)
	hf := sites[1]
	hf.stop()
	own := strings.Replace(string(baseIni("")), "serverPort=18123\n", "serverPort=18123\ndataPath=/var/hf-own\n", 1)
	own = strings.Replace(own, "[site]\noverlay=site.ini\n", "[site]\noverlay=site.ini\ntoken=hf-own-token\n", 1)
	must(t, os.WriteFile(hf.path, []byte(own), 0o644))
	overlay := strings.Replace(string(overlayIni("hf", 2)), "dataPath=/var/metaq/hf\n", "", 1)
	must(t, os.WriteFile(filepath.Join(hf.dir, "site.ini"), []byte(overlay), 0o644))
	hf.start(t)
	waitSitesKnown(t, c, "bj", "gz", "hf")

	rep, err := push(t, c, baseIni("[topic=o]\n"))
	if err == nil {
		t.Fatal("push reported success although hf refused it")
	}
	r := rep.Results["hf"]
	if r.OK || !strings.Contains(r.Error, "[system] dataPath") || !strings.Contains(r.Error, "[site] token") {
		t.Fatalf("hf: %+v", r)
	}
	sameBytes(t, "hf keeps its file", hf.file(t), []byte(own))
	for _, s := range []*site{sites[0], sites[2]} {
		if r := rep.Results[s.name]; !r.OK {
			t.Errorf("%s: %+v", s.name, r)
		}
	}
}
