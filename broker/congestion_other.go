//go:build !linux

package broker

import "net"

// setCongestion does nothing where TCP_CONGESTION does not exist: the
// host's congestion control applies.
func setCongestion(net.Listener, string) (string, error) { return "", nil }
