// Package portprobe tells what answers on an address when a client got no
// sense out of it, so errors can name it ("a MetaQ broker port, not
// ZooKeeper") instead of timing out or saying EOF.
package portprobe

import (
	"bufio"
	"context"
	"net"
	"strings"
	"time"
)

// MetaQ sends MetaQ's `version` command to addr and returns the first line
// of the answer when it is a MetaQ one ("result 200 ..."). ok is false when
// nothing listens, the peer answers something else, or nothing within
// timeout. Only for error paths: a server of another protocol sees a line
// it does not understand.
func MetaQ(ctx context.Context, addr string, timeout time.Duration) (answer string, ok bool) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("version 0\r\n")); err != nil {
		return "", false
	}
	line, err := bufio.NewReaderSize(c, 256).ReadString('\n')
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "result ") {
		return "", false
	}
	_ = err // a partial first line is enough
	return line, true
}
