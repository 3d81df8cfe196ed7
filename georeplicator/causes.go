package georeplicator

import (
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
)

var (
	// errNoHandshake: something answered at the address, but not as a
	// replication listener (no welcome, or bytes that are not a frame).
	errNoHandshake = errors.New("no replication handshake answer")
	// errRefused: the master answered hello with an error.
	errRefused = errors.New("the master refused this slave")
	// errResolve: the master's address could not be found.
	errResolve = errors.New("cannot find the master's address")
	// errAttemptAbandoned: Redial (the master's entries changed) ended a
	// connection attempt before the master welcomed it.
	errAttemptAbandoned = errors.New("the master's address changed: connection attempt abandoned")
)

// causeLog logs a failure at WARN the first time it happens, with what to
// change, and repeats of the same cause at DEBUG only: a slave that cannot
// replicate says so once per distinct cause, not every retry. A success
// (clear) re-arms the warning.
type causeLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	last map[string]string // scope -> the cause last warned about
}

func newCauseLog(log *slog.Logger) *causeLog {
	return &causeLog{log: log, last: map[string]string{}}
}

// report logs err for scope (e.g. "link"), tried at addr. hint, when "",
// is derived from the error.
func (c *causeLog) report(scope, addr string, err error, hint string) {
	if hint == "" {
		hint = hintFor(err)
	}
	key := causeKey(err) + "|" + addr
	c.mu.Lock()
	repeat := c.last[scope] == key
	c.last[scope] = key
	c.mu.Unlock()
	args := []any{"addr", addr, "err", err}
	if hint != "" {
		args = append(args, "fix", hint)
	}
	if repeat {
		c.log.Debug("REPLICATION: replication still failing, same cause", args...)
		return
	}
	c.log.Warn("REPLICATION: cannot replicate from the master", args...)
}

// clear forgets scope's last cause, so its next failure warns again.
func (c *causeLog) clear(scope string) {
	c.mu.Lock()
	delete(c.last, scope)
	c.mu.Unlock()
}

// causeKey groups errors that have the same cause and the same remedy.
func causeKey(err error) string {
	var de *DivergedError
	var ps *partStop
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused-connection"
	case errors.Is(err, errNoHandshake):
		return "no-handshake"
	case errors.Is(err, errRefused), errors.As(err, &de), errors.As(err, &ps):
		return err.Error() // the reason is the cause
	case errors.Is(err, errResolve):
		return "resolve:" + err.Error()
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "unreachable"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return "net:" + op.Op
	}
	return "other"
}

// hintFor says what an operator changes for a failure.
func hintFor(err error) string {
	var de *DivergedError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at this address: start the master, or correct it (masterAddress in async_slave.properties, [replication] listen on the master; a MetaQ 1.4.6 master has no replication listener: leave masterAddress unset and let ZooKeeper tell)"
	case errors.Is(err, errNoHandshake):
		return "something answers at this address, but serves no replication stream (the MetaQ port of a slave, of a Java broker, of a master with [replication] enable=false, or of one whose [replication] listen is set elsewhere), or the master serves TLS and this slave dials without it: point masterAddress at the master's MetaQ port (or its [replication] listen when set), or leave it unset so ZooKeeper tells; for TLS set tlsCert, tlsKey and tlsCA (async_slave.properties, or [replication] on a site that follows after a failover)"
	case errors.Is(err, errRefused) && strings.Contains(err.Error(), "brokerId"):
		return "a slave copies the master with its own brokerId: set [system] brokerId in this slave's server.ini to the master's"
	case errors.Is(err, errRefused):
		return "the master says why above; change this slave's settings (async_slave.properties) accordingly"
	case errors.Is(err, errResolve):
		return "the master is not registered: start it, check zk.zkConnect and zk.zkRoot (they must be the master's), or set masterAddress in async_slave.properties"
	case errors.As(err, &de):
		return "this slave's copy differs from the master's: repair or remove the partition on the slave, then it is copied again"
	case strings.Contains(err.Error(), "tls"):
		return "check tlsCert, tlsKey and tlsCA on both sides"
	case errors.As(err, &ne) && ne.Timeout():
		return "the address does not answer in time: check the route and firewalls between the sites"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the master: check the network between the sites"
	}
	return ""
}
