package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/internal/diskfill"
	"metaq/internal/testutil"
)

// TestRestartOnFullDiskComesUp is seed 941024 of the soak as a bundle
// sees it: a site restarted while its data filesystem (a tmpfs of its own)
// is full, with a log to re-index (no checkpoint, the .idx files cut to
// their header, as a failed sealing at a full roll leaves them), comes up
// (before, it exited: "open store: write index ...: no space left on
// device"), serves what it has, says in /status that it refuses puts for
// the full disk and which index it holds in memory (/metrics too), and
// once the disk has room writes that index and accepts puts, no restart.
func TestRestartOnFullDiskComesUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "[topic=e2e]\nnumPartitions=1\n\n[site]\ndashboardAddr=127.0.0.1:0\n")
	data := filepath.Join(e.dir, "data")
	diskfill.MountTmpfs(t, data, 16<<20)

	// Small segments of about 200 chunks each: a segment's index needs
	// more than the one page its cut .idx keeps.
	editINI(t, e, "maxSegmentSize=1048576", "maxSegmentSize=65536")
	b := e.start(t)
	body := bytes.Repeat([]byte("d"), 250)
	for i := 0; i < 700; i++ {
		msg := store.Message{Body: append([]byte(fmt.Sprintf("%d-", i)), body...)}
		if _, err := b.Store.Append(context.Background(), "e2e", 0, []store.Message{msg}); err != nil {
			t.Fatal(err)
		}
	}
	want := readPartition(t, b.Store, "e2e", 0)
	b.Close()
	idx, _ := filepath.Glob(filepath.Join(data, "log", "*.idx"))
	if len(idx) < 3 {
		t.Fatalf("%d segments, want at least 3", len(idx))
	}
	if err := os.Remove(filepath.Join(data, "checkpoint")); err != nil {
		t.Fatal(err)
	}
	for _, f := range idx {
		if err := os.Truncate(f, 32); err != nil {
			t.Fatal(err)
		}
	}
	ballast := filepath.Join(data, "ballast")
	testutil.FillDisk(t, ballast)

	b = e.start(t)
	if got := readPartition(t, b.Store, "e2e", 0); !bytes.Equal(got, want) {
		t.Fatalf("e2e-0 after the restart on a full disk: %d bytes, want %d", len(got), len(want))
	}
	var st Status
	_, raw := adminDo(t, b, "GET", "/status", "")
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		t.Fatal(err)
	}
	if st.Healthy || !strings.Contains(st.Health, "no space left on device") {
		t.Fatalf("/status does not say the disk is full: %s", raw)
	}
	if st.IndexPending == nil || st.IndexPending.Segments == 0 || st.IndexPending.Entries == 0 {
		t.Fatalf("/status does not report the index held in memory: %s", raw)
	}
	dash := "http://" + mustComp[*dashboardComponent](t, b).Addr()
	pending := regexp.MustCompile(`(?m)^metaq_store_index_pending_segments (\d+)$`)
	_, metrics := testutil.HTTPDo(t, "GET", dash+"/metrics", "")
	if m := pending.FindSubmatch(metrics); m == nil || string(m[1]) == "0" {
		t.Fatalf("/metrics: index_pending_segments %q", m)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	// The broker's write gate probes for room every second.
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		st := b.Status()
		if !st.Healthy || st.IndexPending != nil {
			return fmt.Errorf("healthy %v (%s), index pending %+v", st.Healthy, st.Health, st.IndexPending)
		}
		return nil
	})
	_, metrics = testutil.HTTPDo(t, "GET", dash+"/metrics", "")
	if m := pending.FindSubmatch(metrics); m == nil || string(m[1]) != "0" {
		t.Fatalf("/metrics once the index is written: index_pending_segments %q", m)
	}
	mc, err := dialMeta(b.Broker.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close()
	if _, _, err := mc.put("e2e", 0, []byte("after the disk had room")); err != nil {
		t.Fatalf("put once the disk has room: %v", err)
	}
	if got := readPartition(t, b.Store, "e2e", 0); !bytes.HasPrefix(got, want) || len(got) <= len(want) {
		t.Fatalf("e2e-0 after the put: %d bytes, want more than %d starting with the old ones", len(got), len(want))
	}
}
