package hostaddr

import (
	"net"
	"testing"
)

// Addresses below are from the documentation ranges (RFC 5737, RFC 3849):
// the selection rule is exercised on values, nothing is sent to them.

func ipnet(t *testing.T, cidr string) net.Addr {
	t.Helper()
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	n.IP = ip
	return n
}

func TestPickHost(t *testing.T) {
	up := net.FlagUp
	lo := net.FlagUp | net.FlagLoopback
	cases := []struct {
		name   string
		ifaces []ifaceAddrs
		want   string
	}{
		{"nothing", nil, "127.0.0.1"},
		{"only loopback", []ifaceAddrs{{lo, []net.Addr{ipnet(t, "127.0.0.1/8"), ipnet(t, "::1/128")}}}, "127.0.0.1"},
		{"first IPv4 of first up interface", []ifaceAddrs{
			{lo, []net.Addr{ipnet(t, "127.0.0.1/8")}},
			{up, []net.Addr{ipnet(t, "198.51.100.7/24"), ipnet(t, "203.0.113.9/24")}},
			{up, []net.Addr{ipnet(t, "203.0.113.10/24")}},
		}, "198.51.100.7"},
		{"IPv4 wins over an earlier IPv6", []ifaceAddrs{
			{up, []net.Addr{ipnet(t, "2001:db8::5/64")}},
			{up, []net.Addr{ipnet(t, "203.0.113.10/24")}},
		}, "203.0.113.10"},
		{"down interface skipped", []ifaceAddrs{
			{0, []net.Addr{ipnet(t, "198.51.100.1/24")}},
			{up, []net.Addr{ipnet(t, "203.0.113.2/24")}},
		}, "203.0.113.2"},
		{"loopback flag skipped even with a routable address", []ifaceAddrs{
			{lo, []net.Addr{ipnet(t, "198.51.100.1/24")}},
			{up, []net.Addr{ipnet(t, "203.0.113.3/24")}},
		}, "203.0.113.3"},
		{"link-local and loopback addresses skipped", []ifaceAddrs{
			{up, []net.Addr{ipnet(t, "169.254.1.1/16"), ipnet(t, "fe80::1/64"), ipnet(t, "127.0.0.2/8"), ipnet(t, "2001:db8::7/64")}},
		}, "2001:db8::7"},
		{"first IPv6 when no IPv4", []ifaceAddrs{
			{up, []net.Addr{ipnet(t, "fe80::2/64")}},
			{up, []net.Addr{ipnet(t, "2001:db8::1/64"), ipnet(t, "2001:db8::2/64")}},
			{up, []net.Addr{ipnet(t, "2001:db8::3/64")}},
		}, "2001:db8::1"},
		{"non-IPNet address ignored", []ifaceAddrs{
			{up, []net.Addr{&net.IPAddr{IP: net.ParseIP("198.51.100.99")}}},
		}, "127.0.0.1"},
	}
	for _, c := range cases {
		if got := pickHost(c.ifaces); got != c.want {
			t.Errorf("%s: pickHost = %q, want %q", c.name, got, c.want)
		}
	}
}
