package configsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// genuineVersion reads version n as published.
func genuineVersion(t *testing.T, c *Client, n uint64) *Version {
	t.Helper()
	v, err := c.Version(context.Background(), n)
	must(t, err)
	return v
}

// TestRewoundBucketRefused: a bucket writer without any key sets the
// desired version back to a genuine old one: the site refuses it (an older
// version, said in its state), the pusher fails loudly instead of numbering
// its push from it (and printing an old answer as this push's), and once
// the bucket holds the newest version again, pushes work. A forged version
// number at uint64's maximum does not wrap the next push to 0.
func TestRewoundBucketRefused(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	var files [][]byte
	for i := 1; i <= 3; i++ {
		files = append(files, baseIni(fmt.Sprintf("[topic=t%d]\n", i)))
		rep, err := push(t, c, files[i-1], "bj")
		must(t, err)
		if rep.Version != uint64(i) {
			t.Fatalf("push %d published version %d", i, rep.Version)
		}
	}
	v3 := s.file(t)
	sameBytes(t, "site at version 3", v3, files[2])

	// The desired key set back to the genuine version 1.
	forge(t, e.ClientURL(), genuineVersion(t, c, 1))
	waitRejected(t, s, 1, "older than version 3 applied here")
	sameBytes(t, "site after the set-back", s.file(t), v3)

	// The next genuine push fails loudly and publishes nothing.
	rep, err := push(t, c, baseIni("[topic=t4]\n"), "bj")
	if !errors.Is(err, ErrBucketRewound) || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("push on a set-back bucket: %v (%+v)", err, rep)
	}
	if d, err := c.Desired(context.Background()); err != nil || d.Version != 1 {
		t.Fatalf("desired after the refused push: %+v %v", d, err)
	}

	// Put back, pushes number on from version 3 again.
	forge(t, e.ClientURL(), genuineVersion(t, c, 3))
	rep, err = push(t, c, baseIni("[topic=t4]\n"), "bj")
	if err != nil || rep.Version != 4 || !rep.Results["bj"].OK {
		t.Fatalf("push after the bucket was put back: %v (%+v)", err, rep)
	}
	sameBytes(t, "site at version 4", s.file(t), baseIni("[topic=t4]\n"))

	// A forged desired entry at the largest version number.
	huge := baseIni("[topic=huge]\n")
	forge(t, e.ClientURL(), &Version{Version: math.MaxUint64, SHA256: hashHex(huge), Data: huge})
	waitRejected(t, s, math.MaxUint64, "unsigned")
	rep, err = push(t, c, baseIni("[topic=t5]\n"), "bj")
	if err != nil || rep.Version != 5 || !rep.Results["bj"].OK {
		t.Fatalf("push over a forged maximal version: %v (%+v)", err, rep)
	}
	if st := s.agent.State(); st.Version != 5 || st.Error != "" {
		t.Fatalf("site state %+v, want version 5 applied", st)
	}
}

// TestHandEditedSiteRestartRefusesDowngrade: a site whose file was edited
// by hand restarts while the bucket's desired key holds a genuine older
// version: it is not applied, and the hand-edited file stays.
func TestHandEditedSiteRestartRefusesDowngrade(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	for i := 1; i <= 2; i++ {
		_, err := push(t, c, baseIni(fmt.Sprintf("[topic=t%d]\n", i)), "bj")
		must(t, err)
	}
	s.stop()
	edited := append(s.file(t), []byte("\n;; edited by hand\n")...)
	must(t, os.WriteFile(s.path, edited, 0o644))
	forge(t, e.ClientURL(), genuineVersion(t, c, 1))
	s.start(t)
	waitRejected(t, s, 1, "older than version 2 applied here")
	time.Sleep(200 * time.Millisecond)
	sameBytes(t, "hand-edited file after the restart", s.file(t), edited)
	if n := s.rec.callCount(); n != 0 {
		t.Fatalf("reloaded %d times", n)
	}
	// A genuine push goes on from version 2.
	forge(t, e.ClientURL(), genuineVersion(t, c, 2))
	rep, err := push(t, c, baseIni("[topic=t3]\n"), "bj")
	if err != nil || rep.Version != 3 {
		t.Fatalf("push: %v (%+v)", err, rep)
	}
}

// TestChainWalkedAfterAbsence: a site that missed versions links the one
// it finds to the one it applied through the signed versions in the
// bucket, and refuses a version whose predecessor there was replaced.
func TestChainWalkedAfterAbsence(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	_, err := push(t, c, baseIni("[topic=t1]\n"), "bj")
	must(t, err)
	s.stop()
	ctx := context.Background()
	for i := 2; i <= 4; i++ {
		_, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(fmt.Sprintf("[topic=t%d]\n", i)),
			Timeout: 200 * time.Millisecond, AllowTopicRemoval: true}) // no topic count to wait for from the site that is down
		wantErr(t, err, ErrSitesFailed) // the site is down
	}
	s.start(t)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := s.agent.State(); st.Version != 4 {
			return fmt.Errorf("site state %+v, want version 4", st)
		}
		return nil
	})

	// The copy of version 5's predecessor replaced by another genuine one:
	// the link from 6 to 4 is broken.
	s.stop()
	for i := 5; i <= 6; i++ {
		_, err := c.Push(ctx, PushOptions{File: "server.ini", Data: baseIni(fmt.Sprintf("[topic=t%d]\n", i)),
			Timeout: 200 * time.Millisecond, AllowTopicRemoval: true}) // no topic count to wait for from the site that is down
		wantErr(t, err, ErrSitesFailed) // the site is down
	}
	raw, err := c.kv.Get(ctx, versionKey(2))
	must(t, err)
	_, err = c.kv.Put(ctx, versionKey(5), raw.Value())
	must(t, err)
	s.start(t)
	waitRejected(t, s, 6, "does not follow version 4")
}

// TestLateWatchEntryIsNotARewind: the watch delivers an older desired
// version after the agent already applied a newer one (a pusher's request
// made it read the bucket first, as seen under faults with three sites):
// nothing is applied and no error is recorded, since the bucket holds the
// newer version. Before, the site reported "older than version 3 applied
// here … was the bucket's desired version set back?" until the next push.
func TestLateWatchEntryIsNotARewind(t *testing.T) {
	e := startNATS(t)
	s := newSite(t, "bj", 1, e.ClientURL())
	c := newClient(t, e.ClientURL())
	for i := 1; i <= 3; i++ {
		_, err := push(t, c, baseIni(fmt.Sprintf("[topic=t%d]\n", i)), "bj")
		must(t, err)
	}
	v3 := s.file(t)
	late, err := json.Marshal(genuineVersion(t, c, 2))
	must(t, err)
	s.agent.handleEntry(context.Background(), late)
	if st := s.agent.State(); st.Version != 3 || st.Error != "" {
		t.Fatalf("site state after a late watch entry: %+v, want version 3 and no error", st)
	}
	sameBytes(t, "site after a late watch entry", s.file(t), v3)
}
