//go:build !linux

package georeplicator

import "net"

// setCongestion is a no-op where TCP_CONGESTION does not exist.
func setCongestion(net.Conn, string) error { return nil }

// setNotSentLowat is a no-op where TCP_NOTSENT_LOWAT does not exist.
func setNotSentLowat(net.Conn) error { return nil }
