package config

import (
	"strings"
	"testing"
)

// TestForwardPuts: a topic's forwardPuts overrides [site] forwardPuts,
// which is off by default; other values are refused.
func TestForwardPuts(t *testing.T) {
	base := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n" +
		"[topic=plain]\n[topic=on]\nforwardPuts=true\n[topic=off]\nforwardPuts=false\n"
	for _, tc := range []struct {
		site          string
		plain, on, of bool
	}{{"", false, true, false}, {"[site]\nforwardPuts=true\n", true, true, false}, {"[site]\nforwardPuts=false\n", false, true, false}} {
		s, _, err := Parse("server.ini", []byte(base+tc.site))
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"plain": tc.plain, "on": tc.on, "off": tc.of} {
			tp, ok := s.TopicFor(name)
			if !ok || tp.Forwards(s.Site) != want {
				t.Errorf("site %q: topic %s forwards %v, want %v", tc.site, name, tp.Forwards(s.Site), want)
			}
		}
	}
	_, _, err := Parse("server.ini", []byte(base+"[topic=bad]\nforwardPuts=yes\n"))
	if err == nil || !strings.Contains(err.Error(), "forwardPuts") {
		t.Fatalf("forwardPuts=yes: %v", err)
	}
}

// TestStoreAndForward: a topic's storeAndForward overrides [site]
// storeAndForward (off by default) and applies only to a forwarded topic;
// the outbox bounds are read from [site].
func TestStoreAndForward(t *testing.T) {
	base := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n" +
		"[topic=plain]\n[topic=on]\nstoreAndForward=true\n[topic=off]\nstoreAndForward=false\n[topic=notfwd]\nforwardPuts=false\nstoreAndForward=true\n"
	for _, tc := range []struct {
		site          string
		plain, on, of bool
	}{
		{"[site]\nforwardPuts=true\n", false, true, false},
		{"[site]\nforwardPuts=true\nstoreAndForward=true\n", true, true, false},
		{"", false, false, false}, // nothing forwarded
	} {
		s, _, err := Parse("server.ini", []byte(base+tc.site))
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]bool{"plain": tc.plain, "on": tc.on, "off": tc.of, "notfwd": false} {
			tp, ok := s.TopicFor(name)
			if !ok || tp.StoresAndForwards(s.Site) != want {
				t.Errorf("site %q: topic %s stores and forwards %v, want %v", tc.site, name, tp.StoresAndForwards(s.Site), want)
			}
		}
	}
	s, _, err := Parse("server.ini", []byte(base+"[site]\noutboxMaxBytes=1000\noutboxMaxAgeMs=2500\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Site.OutboxMaxBytes != 1000 || s.Site.OutboxMaxAge.Milliseconds() != 2500 {
		t.Fatalf("outbox bounds %d %v", s.Site.OutboxMaxBytes, s.Site.OutboxMaxAge)
	}
	if s.Site.ForwardMaxInFlightBytes != 0 {
		t.Fatalf("forwardMaxInFlightBytes unset: %d, want 0 (the broker's default)", s.Site.ForwardMaxInFlightBytes)
	}
	s, _, err = Parse("server.ini", []byte(base+"[site]\nforwardMaxInFlightBytes=4096\n"))
	if err != nil || s.Site.ForwardMaxInFlightBytes != 4096 {
		t.Fatalf("forwardMaxInFlightBytes=4096: %v, %+v", err, s.Site)
	}
	if !IsHostKey(sectionSite, "forwardMaxInFlightBytes") {
		t.Fatal("forwardMaxInFlightBytes is not a host key")
	}
	if _, _, err := Parse("server.ini", []byte(base+"[site]\nforwardMaxInFlightBytes=-1\n")); err == nil || !strings.Contains(err.Error(), "forwardMaxInFlightBytes") {
		t.Fatalf("forwardMaxInFlightBytes=-1: %v", err)
	}
	if _, _, err := Parse("server.ini", []byte(base+"[topic=bad]\nstoreAndForward=maybe\n")); err == nil || !strings.Contains(err.Error(), "storeAndForward") {
		t.Fatalf("storeAndForward=maybe: %v", err)
	}
}
