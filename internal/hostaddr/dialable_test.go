package hostaddr

import "testing"

func TestDialable(t *testing.T) {
	cases := []struct {
		addr, fallback, want string
	}{
		{"0.0.0.0:8120", "127.0.0.1", "127.0.0.1:8120"},
		{":8120", "127.0.0.1", "127.0.0.1:8120"},
		{"[::]:8120", "127.0.0.1", "127.0.0.1:8120"},
		{"[::]:8120", "2001:db8::1", "[2001:db8::1]:8120"},
		{"0.0.0.0:8120", "bj.example", "bj.example:8120"},
		{"[0:0:0:0:0:0:0:0]:8120", "bj.example", "bj.example:8120"},
		{"198.51.100.7:8120", "127.0.0.1", "198.51.100.7:8120"},
		{"[2001:db8::7]:8120", "127.0.0.1", "[2001:db8::7]:8120"},
		{"bj.example:8120", "127.0.0.1", "bj.example:8120"},
		{"127.0.0.1:8120", "198.51.100.1", "127.0.0.1:8120"},
		{"0.0.0.0:8120", "", "0.0.0.0:8120"}, // no fallback: unchanged
		{"not-an-address", "127.0.0.1", "not-an-address"},
		{"", "127.0.0.1", ""},
	}
	for _, c := range cases {
		if got := Dialable(c.addr, c.fallback); got != c.want {
			t.Errorf("Dialable(%q, %q) = %q, want %q", c.addr, c.fallback, got, c.want)
		}
	}
}

func TestIsWildcard(t *testing.T) {
	for host, want := range map[string]bool{
		"": true, "0.0.0.0": true, "::": true, "0:0:0:0:0:0:0:0": true,
		"127.0.0.1": false, "::1": false, "198.51.100.7": false, "localhost": false, "bj.example": false,
	} {
		if got := IsWildcard(host); got != want {
			t.Errorf("IsWildcard(%q) = %v, want %v", host, got, want)
		}
	}
}
