package bundle

import (
	"net/url"
	"testing"
	"time"

	"metaq/broker/config"
)

// TestAdminCallBound: the bound a client of the admin endpoint waits for
// (plus its margin) covers every wait the call asks the server for. With
// deploy/'s 30 s ZooKeeper session, promote -wait may take 10 s (raise) +
// 60 s (the session, then the master node) + 20 s (finishWait) + 10 s
// (followWait): more than the fixed minute the client waited before.
func TestAdminCallBound(t *testing.T) {
	t.Parallel()
	cfg := &config.Server{}
	cfg.ZooKeeper.SessionTimeout = 30 * time.Second
	for _, tc := range []struct {
		method, path string
		q            url.Values
		want         time.Duration
	}{
		{"POST", "/promote", url.Values{"wait": {"true"}}, raiseTimeout + 60*time.Second + defaultFinishWait + defaultFollowWait},
		{"POST", "/promote", nil, raiseTimeout + 30*time.Second + defaultFinishWait + defaultFollowWait},
		{"POST", "/promote", url.Values{"finishWait": {"2m"}, "followWait": {"1s"}}, raiseTimeout + 30*time.Second + 2*time.Minute + time.Second},
		{"POST", "/switchover", url.Values{"to": {"hf"}}, switchoverCallTimeout + defaultFollowWait},
		{"POST", "/switchover", url.Values{"followWait": {"30s"}}, switchoverCallTimeout + 30*time.Second},
		{"GET", "/status", nil, 0},
		{"POST", "/reload", nil, 0},
	} {
		if got := AdminCallBound(cfg, tc.method, tc.path, tc.q); got != tc.want {
			t.Errorf("%s %s?%s: %v, want %v", tc.method, tc.path, tc.q.Encode(), got, tc.want)
		}
	}
	if got := AdminCallBound(cfg, "POST", "/promote", url.Values{"wait": {"true"}}); got <= time.Minute {
		t.Errorf("promote -wait at a 30 s session: bound %v, want more than the minute a client used to wait", got)
	}
}

// TestPromoteFinishTimeoutFromServerINI: the finisher's bound is
// Options.PromoteFinishTimeout when set, else [replication]
// promoteFinishTimeoutMs (before, server.ini could not set it).
func TestPromoteFinishTimeoutFromServerINI(t *testing.T) {
	t.Parallel()
	cfg, _, err := config.Parse("server.ini", []byte("[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n[topic=t]\n[replication]\npromoteFinishTimeoutMs=90000\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := &Bundle{}
	b.cfg.Store(cfg)
	if got := b.promoteFinishTimeout(); got != 90*time.Second {
		t.Errorf("promoteFinishTimeoutMs=90000: the finisher's bound is %v", got)
	}
	b.opts.PromoteFinishTimeout = time.Second
	if got := b.promoteFinishTimeout(); got != time.Second {
		t.Errorf("Options.PromoteFinishTimeout=1s: the finisher's bound is %v", got)
	}
}
