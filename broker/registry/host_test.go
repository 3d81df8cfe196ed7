package registry

import (
	"net"
	"testing"

	"metaq/internal/hostaddr"
)

// TestURLFallsBackToLocalHost checks that a registry without a hostName
// advertises the machine's hostaddr.Local address, that hostName wins, and
// that a URL set by the broker wins over both.
func TestURLFallsBackToLocalHost(t *testing.T) {
	want := hostaddr.Local()
	if ip := net.ParseIP(want); ip == nil {
		t.Fatalf("hostaddr.Local() = %q is not an IP address", want)
	}
	r := &Registry{opts: Options{Port: 8123}}
	if got := r.URL(); got != BrokerURL(want, 8123) {
		t.Fatalf("URL without host = %q, want %q", got, BrokerURL(want, 8123))
	}
	r = &Registry{opts: Options{Host: "127.0.0.1", Port: 8123}}
	if got := r.URL(); got != "meta://127.0.0.1:8123" {
		t.Fatalf("URL with host = %q", got)
	}
	r.SetURL("meta://127.0.0.1:40123")
	if got := r.URL(); got != "meta://127.0.0.1:40123" {
		t.Fatalf("URL after SetURL = %q", got)
	}
	for _, c := range []struct{ host, want string }{
		{"2001:db8::1", "meta://[2001:db8::1]:8123"},
		{"[2001:db8::1]", "meta://[2001:db8::1]:8123"},
		{"broker1.example", "meta://broker1.example:8123"},
	} {
		if got := BrokerURL(c.host, 8123); got != c.want {
			t.Errorf("BrokerURL(%q) = %q, want %q", c.host, got, c.want)
		}
	}
}

func TestParseBrokerNode(t *testing.T) {
	for _, c := range []struct {
		name  string
		slave int
		ok    bool
	}{
		{"master", -1, true}, {"slave0", 0, true}, {"slave12", 12, true},
		{"master_config_checksum", 0, false}, {"slave", 0, false}, {"slavex", 0, false}, {"topics", 0, false},
	} {
		if s, ok := ParseBrokerNode(c.name); s != c.slave || ok != c.ok {
			t.Errorf("ParseBrokerNode(%q) = %d, %v; want %d, %v", c.name, s, ok, c.slave, c.ok)
		}
	}
}
