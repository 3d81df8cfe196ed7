package main

import (
	"strings"
	"testing"
)

// TestStatusSummaryShipper: a master's summary names where it ships, each
// slave group with its state and lag, and says so when its replication
// address is not published; a stopped component says NOT running.
func TestStatusSummaryShipper(t *testing.T) {
	body := `{"mode":"master","brokerId":1,"slaveId":-1,"url":"meta://127.0.0.1:8123","uptime":"5s","healthy":true,
	"components":{"replication-master":{"running":true,"addr":"127.0.0.1:8124","published":false,
	"slaves":[{"Group":"meta-slave-group-bj","SlaveID":1,"Connected":true,"LogBytes":0},
	          {"Group":"meta-slave-group-gz","SlaveID":2,"Connected":false,"LogBytes":4096}]},
	"dashboard":{"running":false}}}`
	var out strings.Builder
	if err := printStatusSummary(&out, []byte(body)); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"replication-master: shipping at 127.0.0.1:8124, address NOT published in ZooKeeper; ",
		"meta-slave-group-bj/1 connected, 0 log bytes behind",
		"meta-slave-group-gz/2 NOT connected, 4096 log bytes behind",
		"dashboard: NOT running",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	var none strings.Builder
	if err := printStatusSummary(&none, []byte(`{"components":{"replication-master":{"running":true,"addr":"a:1","slaves":[]}}}`)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(none.String(), "shipping at a:1, no slave attached") {
		t.Errorf("summary with no slave:\n%s", none.String())
	}
}

// TestStatusSummarySteppedDown: a master that stepped down for a newer
// generation and has not finished its demotion says so.
func TestStatusSummarySteppedDown(t *testing.T) {
	body := `{"mode":"slave","brokerId":1,"slaveId":-1,"url":"meta://127.0.0.1:8123","uptime":"5s","healthy":true,
	"steppedDown":"this master of generation 3 stepped down (generation 5 took over)"}`
	var out strings.Builder
	if err := printStatusSummary(&out, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, "slave of brokerId 1") ||
		!strings.Contains(got, "STEPPED DOWN: this master of generation 3 stepped down (generation 5 took over)") {
		t.Errorf("summary of a stepped-down master:\n%s", got)
	}
}
