package config

import (
	"strings"
	"testing"
	"time"
)

func TestParseSamsa(t *testing.T) {
	s, w, err := ParseSamsa("samsa.properties", []byte("slave=127.0.0.1:1\nsendToSlaveTimeoutInMills=1500\n"+
		"checkSlaveIntervalInMills=250\nslaveContinuousFailureThreshold=7\ncallbackThreadCount=6\n"+
		"recoverOffset=TRUE\nrecoverParallel=true\nrecoverParallelHint=3\n"))
	if err != nil || len(w) != 0 {
		t.Fatal(err, w)
	}
	want := Samsa{File: "samsa.properties", Slave: "127.0.0.1:1", SyncTimeout: 1500 * time.Millisecond,
		SyncProbeInterval: 250 * time.Millisecond, SyncFailureThreshold: 7, RecoverOffset: true, RecoverParallel: true, RecoverParallelHint: 3}
	if *s != want {
		t.Fatalf("got %+v\nwant %+v", *s, want)
	}
	// Defaults: zero for the broker's own, parallel recovery on; booleans
	// as Java's Boolean.valueOf reads them.
	s, _, err = ParseSamsa("f", []byte("slave=h:1\nrecoverOffset=yes\n"))
	if err != nil || *s != (Samsa{File: "f", Slave: "h:1", RecoverParallel: true}) {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, _, err = ParseSamsa("f", []byte("slave=h:1\nrecoverParallel=no\n"))
	if err != nil || s.RecoverParallel {
		t.Fatalf("recoverParallel=no: %+v %v", s, err)
	}
	_, w, err = ParseSamsa("f", []byte("slave=h:1\nslaveContinousFailureThreshold=3\n"))
	if err != nil || len(w) != 1 || !strings.Contains(w[0].String(), "slaveContinuousFailureThreshold") {
		t.Fatalf("misspelt key: %v %v", w, err)
	}
	for _, bad := range []string{
		"",             // slave missing
		"slave=nohost", // not host:port
		"slave=h:1\nsendToSlaveTimeoutInMills=soon",
		"slave=h:1\ncheckSlaveIntervalInMills=0",
		"slave=h:1\nslaveContinuousFailureThreshold=-1",
		"slave=h:1\nrecoverParallelHint=0",
		"slave=h:1\nrecoverParallelHint=many",
	} {
		if _, _, err := ParseSamsa("samsa.properties", []byte(bad)); err == nil || !strings.Contains(err.Error(), "samsa.properties") {
			t.Errorf("%q: error %v, want one naming the file", bad, err)
		}
	}
}

// TestSampleSamsaProperties: conf/samsa_master.properties loads without a
// warning.
func TestSampleSamsaProperties(t *testing.T) {
	s, w, err := LoadSamsa("../../conf/samsa_master.properties")
	if err != nil || len(w) != 0 {
		t.Fatal(err, w)
	}
	if s.Slave != "127.0.0.1:8223" || s.RecoverOffset || s.RecoverParallelHint != 2 {
		t.Fatalf("%+v", s)
	}
}
