package registry

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/go-zookeeper/zk"
)

// TestConnectionLost: a request written while the connection is being
// closed under it comes back as the socket's own error (net.ErrClosed),
// which is ZooKeeper out of reach like the library's errors, not an answer
// (before, a demotion right after a cut failed on it instead of retrying).
func TestConnectionLost(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("registry: become slave: %w", zk.ErrNoServer), true},
		{fmt.Errorf("registry: become slave: %w", zk.ErrConnectionClosed), true},
		{zk.ErrSessionExpired, true},
		{fmt.Errorf("registry: become slave: %w", &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}), true},
		{fmt.Errorf("registry: become slave: %w", ErrBrokerNodeHeld), false},
		{errors.New("fenced"), false},
		{nil, false},
	} {
		if got := ConnectionLost(c.err); got != c.want {
			t.Errorf("ConnectionLost(%v) = %t, want %t", c.err, got, c.want)
		}
	}
}
