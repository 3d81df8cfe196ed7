package broker

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/store"
	"metaq/broker/store/storetest"
	"metaq/broker/wire"
	"metaq/internal/testutil"
)

// TestGetInDamagedRange: a get inside records lost to disk damage is
// answered 301 with the next readable offset, and what follows is served
// at its original offset.
func TestGetInDamagedRange(t *testing.T) {
	cfg := parseConfig(t, iniWith(t, ""))
	dir := t.TempDir()
	brk := startBrokerDir(t, cfg, dir, nil)
	cl := dial(t, brk.Addr())
	bodies := []string{strings.Repeat("a", 30), strings.Repeat("b", 30), strings.Repeat("c", 30)}
	for _, b := range bodies {
		mustPut(t, cl, "test", 0, b)
	}
	brk.Close()
	brk.store.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
	raw, _ := os.ReadFile(segs[0])
	i := bytes.Index(raw, []byte(bodies[1]))
	raw[i+3] ^= 0xFF
	os.WriteFile(segs[0], raw, 0o644)
	os.Remove(filepath.Join(dir, "checkpoint"))

	brk2 := startBrokerDir(t, cfg, dir, nil)
	cl2 := dial(t, brk2.Addr())
	rec := int64(20 + 30)
	cl2.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: rec, MaxSize: 100, Opaque: 1})
	if r := cl2.result(); r.Code != 301 || string(r.Body) != strconv.FormatInt(2*rec, 10) {
		t.Fatalf("get in the damaged record: %s", r)
	}
	cl2.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: 2 * rec, MaxSize: 100, Opaque: 2})
	v, ok := cl2.read().(*wire.Value)
	if !ok || !bytes.Contains(v.Data, []byte(bodies[2])) {
		t.Fatal("the record after the damage is not served at its offset")
	}
	if d := brk2.store.Degraded(); d == nil || !strings.Contains(d.Error(), "test-0 [50, 100)") {
		t.Fatalf("Degraded = %v", d)
	}
}

// TestPutOnFullDisk: a put the full disk refused names the reason; then
// the write gate refuses puts (503, "no space left on device") without
// touching the disk, the broker reports itself unhealthy, and once there is
// room the broker accepts puts again by itself, without a restart.
func TestPutOnFullDisk(t *testing.T) {
	defer func(d time.Duration) { diskProbeInterval = d }(diskProbeInterval)
	diskProbeInterval = 10 * time.Millisecond
	cfg := parseConfig(t, iniWith(t, ""))
	ffs := &storetest.FullFS{}
	st, err := store.Open(store.Options{Dir: t.TempDir(), FS: ffs})
	if err != nil {
		t.Fatal(err)
	}
	brk := startBroker(t, cfg, func(o *Options) { o.Store = st })
	t.Cleanup(func() { st.Close() })
	cl := dial(t, brk.Addr())
	mustPut(t, cl, "test", 0, "before")
	ffs.Full.Store(true)
	cl.sendCmd(putCmd("test", 0, "refused", 2))
	if r := cl.result(); r.Code != 500 || !strings.Contains(string(r.Body), "no space left on device") {
		t.Fatalf("put on a full disk: %s", r)
	}
	cl.sendCmd(putCmd("test", 0, "refused at the gate", 3))
	if r := cl.result(); r.Code != 503 || !strings.Contains(string(r.Body), "failed.Detail:no space left on device") {
		t.Fatalf("put while the disk is full: %s", r)
	}
	if err := brk.Health(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("Health on a full disk: %v", err)
	}
	ffs.Full.Store(false)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if r := brk.WriteRefusal(); r != nil {
			return errors.New(r.Reason)
		}
		return nil
	})
	mustPut(t, cl, "test", 0, "after")
	if err := brk.Health(); err != nil {
		t.Fatalf("Health after room was freed: %v", err)
	}
}
