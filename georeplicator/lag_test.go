package georeplicator

import (
	"encoding/json"
	"testing"
	"time"
)

func TestGroupLagSummary(t *testing.T) {
	parts := []PartitionLag{
		{Topic: "t", Partition: 0, Bytes: 100, Messages: 2, Behind: 3 * time.Second},
		{Topic: "t", Partition: 1, Bytes: 50, Messages: 1, Behind: 7 * time.Second},
	}
	for _, tc := range []struct {
		name string
		g    GroupLag
		want LagState
	}{
		{"not connected", GroupLag{Connected: false, Partitions: parts}, LagDown},
		{"a partition stuck", GroupLag{Connected: true, Partitions: append([]PartitionLag{{Stuck: true}}, parts...)}, LagStuck},
		{"the log stuck", GroupLag{Connected: true, Stuck: true}, LagStuck},
		{"behind the threshold", GroupLag{Connected: true, Partitions: parts}, LagLagging},
		{"caught up", GroupLag{Connected: true, Partitions: parts[:1]}, LagOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.g.Group, tc.g.SlaveID = "g", 2
			s := tc.g.Summary(5 * time.Second)
			if s.State != tc.want || s.SlaveGroup != "g" || s.SlaveID != 2 || s.Partitions != len(tc.g.Partitions) {
				t.Fatalf("summary %+v, want state %v", s, tc.want)
			}
		})
	}
	s := (&GroupLag{Connected: true, Partitions: parts}).Summary(time.Minute)
	if s.Bytes != 150 || s.Messages != 3 || s.Behind != 7*time.Second {
		t.Fatalf("totals %+v", s)
	}
	// The state travels by name (gossip JSON, /lag, the dashboard).
	b, _ := json.Marshal(s)
	var back LagSummary
	if err := json.Unmarshal(b, &back); err != nil || back != s {
		t.Fatalf("round trip %s: %+v, %v", b, back, err)
	}
}
