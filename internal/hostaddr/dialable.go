package hostaddr

import "net"

// Dialable turns a listen address into one another process can dial: when
// its host is a wildcard bind ("", 0.0.0.0, ::) the host becomes fallback,
// which each caller picks for its own case (loopback for a command on the
// same host, a member's gossip host, [system] hostName). An address that is
// not host:port, or an empty fallback, leaves addr as it is.
func Dialable(addr, fallback string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || fallback == "" || !IsWildcard(host) {
		return addr
	}
	return net.JoinHostPort(fallback, port)
}

// IsWildcard reports whether host is a wildcard bind: empty, or an
// unspecified IPv4 or IPv6 address.
func IsWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}
