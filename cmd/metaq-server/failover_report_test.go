package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"metaq/georeplicator"
	"metaq/internal/bundle"
	"metaq/topology"
)

// TestPrintPromote: `metaq-server promote` prints how far behind the old
// master this site was per partition (bytes, messages, age of the oldest
// missing record) from the master's last lag report, with the totals and
// the partitions left out of the report counted.
func TestPrintPromote(t *testing.T) {
	rep := bundle.PromoteReport{Generation: 2, Took: 120 * time.Millisecond, BehindBytes: 5000, MasterPos: 9000, AppliedPos: 4000,
		Ends: map[string]int64{"orders-0": 10, "orders-1": 20, "audit-0": 30},
		LagReport: &georeplicator.LagReport{Received: time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC), Bytes: 4800, Messages: 48,
			Lagging: 3, Partitions: []georeplicator.PartitionLag{
				{Topic: "orders", Partition: 1, Bytes: 3000, Messages: 30, Behind: 1500 * time.Millisecond},
				{Topic: "orders", Partition: 0, Bytes: 1500, Messages: 15, Behind: 800 * time.Millisecond},
			}}}
	body, _ := json.Marshal(rep)
	var out bytes.Buffer
	if err := printPromote(&out, body); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"master at generation 2",
		"5000 bytes of its log",
		"(received 2026-12-01T19:00:00Z): 4800 bytes, 48 messages behind in 3 partitions",
		"(1 more partitions behind, not listed)",
		"partition ends recorded for 3 partitions",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, row := range []string{`orders-1\s+3000\s+30\s+1.5s`, `orders-0\s+1500\s+15\s+800ms`, `partition\s+bytes\s+messages\s+oldest missing`} {
		if !regexp.MustCompile(row).MatchString(got) {
			t.Errorf("output lacks a row matching %q:\n%s", row, got)
		}
	}

	// From a master that sends no lag reports: the gossiped summary.
	rep.LagReport = nil
	rep.Lag = &topology.Report{LagSummary: topology.LagSummary{Bytes: 77, Messages: 7}}
	body, _ = json.Marshal(rep)
	out.Reset()
	if err := printPromote(&out, body); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "its last gossiped summary: 77 bytes, 7 messages behind") {
		t.Fatalf("without a lag report:\n%s", out.String())
	}
}

// TestPrintSwitchover: the report printed at a slave site names the new
// master, the generation, the write downtime and the master that did it.
func TestPrintSwitchover(t *testing.T) {
	rep := bundle.SwitchoverReport{To: "meta-slave-group-hf/1", Site: "hf", BrokerID: 2, DurableEnd: 12345, WritesStopped: 312 * time.Millisecond, Generation: 3, Via: "127.0.0.1:8124"}
	body, _ := json.Marshal(rep)
	var out bytes.Buffer
	if err := printSwitchover(&out, body); err != nil {
		t.Fatal(err)
	}
	// The site and the brokerId plainly: "meta-slave-group-hf/1 is the
	// new master" read like a site hf-1.
	if strings.Contains(out.String(), "hf/1") {
		t.Errorf("output names the new master by group/slaveId:\n%s", out.String())
	}
	for _, want := range []string{"switchover: site hf is the new master of broker 2 (generation 3)", "write downtime at the old master: 312ms",
		"which now becomes a slave of site hf",
		"log end 12345", "carried out by the master at 127.0.0.1:8124",
		// The puts that reached bj meanwhile were held and passed on, not refused
		// (README "Losing a site", 1): the line said they were answered 503.
		"held and passed on to the new master"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPrintSwitchoverFollowerMissing: a slave site that did not follow the
// new master is named with the reason, and the command fails instead of
// saying "done".
func TestPrintSwitchoverFollowerMissing(t *testing.T) {
	rep := bundle.SwitchoverReport{To: "meta-slave-group-hf/1", Generation: 3, Following: true, Followers: []bundle.FollowerReport{
		{Site: "bj", SlaveID: 1, Self: true, Reason: "tls: first record does not look like a TLS handshake"},
		{Site: "gz", SlaveID: 2, Following: true},
	}}
	body, _ := json.Marshal(rep)
	var out bytes.Buffer
	err := printSwitchover(&out, body)
	if err == nil || !strings.Contains(err.Error(), "1 slave site(s) do not follow it: bj") {
		t.Fatalf("printSwitchover = %v, want an error naming bj", err)
	}
	for _, want := range []string{"SLAVE SITE bj (this site) (slaveId 1) DOES NOT FOLLOW the slave of group meta-slave-group-hf with slaveId 1: tls: first record", "slave site gz (slaveId 2) follows"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "done") {
		t.Errorf("output says done:\n%s", out.String())
	}
	rep.Followers[0].Following = true
	body, _ = json.Marshal(rep)
	out.Reset()
	if err := printSwitchover(&out, body); err != nil || !strings.Contains(out.String(), "switchover done") {
		t.Fatalf("all following: %v\n%s", err, out.String())
	}
}

// TestPrintFollowersOldMasterDown: the master a promotion replaced, down,
// is printed as the old master and does not fail the command; a slave
// site that does not follow still does.
func TestPrintFollowersOldMasterDown(t *testing.T) {
	fs := []bundle.FollowerReport{
		{Site: "bj", OldMaster: true, Reason: "the old master (generation 2) is down (gossip): it follows the new master once it runs again"},
		{Site: "gz", SlaveID: 2, Following: true},
	}
	var out bytes.Buffer
	if err := printFollowers(&out, "promote", "this site", fs, ""); err != nil {
		t.Fatalf("printFollowers = %v, want success\n%s", err, out.String())
	}
	for _, want := range []string{"old master at site bj: the old master (generation 2) is down", "slave site gz (slaveId 2) follows", "promote done"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	fs[1] = bundle.FollowerReport{Site: "gz", SlaveID: 2, Reason: "it does not reach its master (gossip)"}
	out.Reset()
	if err := printFollowers(&out, "promote", "this site", fs, ""); err == nil || !strings.Contains(err.Error(), "do not follow it: gz") {
		t.Fatalf("gz not following: printFollowers = %v, want an error naming gz only", err)
	}
}
