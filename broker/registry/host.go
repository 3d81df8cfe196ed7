package registry

import "net"

// LocalHost returns the address a broker advertises when hostName is not set:
// the first non-loopback IPv4 address of an up interface, else the first
// such IPv6 address in brackets, else 127.0.0.1 (RemotingUtils.getLocalHost).
func LocalHost() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	var v6 string
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			if ip4 := ipn.IP.To4(); ip4 != nil {
				return ip4.String()
			}
			if v6 == "" {
				v6 = "[" + ipn.IP.String() + "]"
			}
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}
