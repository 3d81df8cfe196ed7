// Package hostaddr picks the address this machine goes by when no host name
// is configured: the one a broker advertises when [system] hostName is blank,
// its replication listener's advertised address, and the host part of a
// consumer id, as MetaQ's RemotingUtils.getLocalHost. One rule for all of
// them, so a broker and its registry never disagree.
package hostaddr

import "net"

// Local returns the first IPv4 address of an up, non-loopback interface that
// is neither loopback nor link-local, else the first such IPv6 address, else
// 127.0.0.1. An IPv6 address comes bare: net.JoinHostPort adds the brackets.
func Local() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	list := make([]ifaceAddrs, 0, len(ifaces))
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			list = append(list, ifaceAddrs{flags: ifc.Flags})
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		list = append(list, ifaceAddrs{flags: ifc.Flags, addrs: addrs})
	}
	return pickHost(list)
}

// ifaceAddrs is one interface as pickHost sees it; kept apart from
// net.Interface so the selection can be exercised with chosen addresses.
type ifaceAddrs struct {
	flags net.Flags
	addrs []net.Addr
}

// pickHost applies Local's selection rule to a list of interfaces in
// system order.
func pickHost(ifaces []ifaceAddrs) string {
	var v6 string
	for _, ifc := range ifaces {
		if ifc.flags&net.FlagUp == 0 || ifc.flags&net.FlagLoopback != 0 {
			continue
		}
		for _, a := range ifc.addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				return ip4.String()
			}
			if v6 == "" {
				v6 = ipn.IP.String()
			}
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}
