package bundle

import (
	"testing"

	"metaq/broker/config"
	"metaq/internal/hostaddr"
)

// TestAdvertiseAddr: a wildcard replication listener is advertised under
// [system] hostName, else this host's address; any other host as written.
func TestAdvertiseAddr(t *testing.T) {
	t.Parallel()
	local := hostaddr.Local()
	for _, c := range []struct{ listen, hostName, want string }{
		{"0.0.0.0:8124", "bj.example", "bj.example:8124"},
		{":8124", "bj.example", "bj.example:8124"},
		{"[::]:8124", "", hostaddr.Dialable("[::]:8124", local)},
		{"0.0.0.0:8124", "", hostaddr.Dialable("0.0.0.0:8124", local)},
		{"198.51.100.7:8124", "bj.example", "198.51.100.7:8124"},
		{"not-an-address", "bj.example", "not-an-address"},
	} {
		cfg := &config.Server{}
		cfg.System.HostName = c.hostName
		if got := advertiseAddr(c.listen, cfg); got != c.want {
			t.Errorf("advertiseAddr(%q, hostName=%q) = %q, want %q", c.listen, c.hostName, got, c.want)
		}
	}
}
