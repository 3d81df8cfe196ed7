package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestPromoteFinishTimeout: [replication] promoteFinishTimeoutMs bounds the
// background finisher of a promotion (default 5 minutes, at least 1 s); a
// misspelt key is named with the right one.
func TestPromoteFinishTimeout(t *testing.T) {
	base := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n[topic=t]\n[replication]\n"
	for _, tc := range []struct {
		keys string
		want time.Duration
	}{{"", DefaultPromoteFinishTimeout}, {"promoteFinishTimeoutMs=60000\n", time.Minute}, {"promoteFinishTimeoutMs=1000\n", time.Second}} {
		s, _, err := Parse("server.ini", []byte(base+tc.keys))
		if err != nil {
			t.Fatalf("%q: %v", tc.keys, err)
		}
		if got := s.Replication.PromoteFinishTimeout; got != tc.want {
			t.Errorf("%q: PromoteFinishTimeout = %v, want %v", tc.keys, got, tc.want)
		}
	}
	if DefaultPromoteFinishTimeout != 5*time.Minute {
		t.Errorf("DefaultPromoteFinishTimeout = %v", DefaultPromoteFinishTimeout)
	}
	for _, bad := range []string{"promoteFinishTimeoutMs=999\n", "promoteFinishTimeoutMs=5m\n"} {
		if _, _, err := Parse("server.ini", []byte(base+bad)); err == nil || !strings.Contains(err.Error(), "promoteFinishTimeoutMs") {
			t.Errorf("%q: %v, want an error naming promoteFinishTimeoutMs", bad, err)
		}
	}
	_, warns, err := Parse("server.ini", []byte(base+"promoteFinishTimeoutMS=60000\n"))
	msg := fmt.Sprint(err, warns)
	if !strings.Contains(msg, `did you mean "promoteFinishTimeoutMs"`) {
		t.Errorf("a misspelt promoteFinishTimeoutMS: %s", msg)
	}
}
