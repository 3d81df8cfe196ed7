//go:build !unix

package peek

import "net"

func firstByte(net.Conn) (byte, error) { return 0, ErrUnsupported }
