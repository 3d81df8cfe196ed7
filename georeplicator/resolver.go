package georeplicator

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Resolver finds the master's replication address (host:port). It is called
// before every connection attempt, so a master that moved is found again.
// Implementations must honour ctx and be safe for concurrent use.
//
// With ZooKeeper on, the bundle supplies a Resolver backed by broker/registry
// that reads <root>/brokers/ids/<brokerId>/replication (written by the master,
// ephemeral, value host:port of its replication listener). A master without
// that node (a MetaQ master) is copied with MetaQPuller instead: its MetaQ
// port serves no stream.
// With ZooKeeper off it is StaticResolver(config.Slave.MasterAddress).
type Resolver interface {
	MasterAddr(ctx context.Context) (string, error)
}

// StaticResolver always returns the same address.
type StaticResolver string

// MasterAddr returns the address.
func (s StaticResolver) MasterAddr(context.Context) (string, error) {
	if s == "" {
		return "", fmt.Errorf("georeplicator: no master address configured")
	}
	return string(s), nil
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context) (string, error)

// MasterAddr calls f.
func (f ResolverFunc) MasterAddr(ctx context.Context) (string, error) { return f(ctx) }

// AddrFromMasterURL turns the master node's value meta://host:port into
// host:(port+offset); offset 0 is the master's MetaQ address, where it also
// serves replication unless it set [replication] listen.
func AddrFromMasterURL(metaURL string, offset int) (string, error) {
	u, err := url.Parse(strings.TrimSpace(metaURL))
	if err != nil || u.Scheme != "meta" || u.Host == "" {
		return "", fmt.Errorf("georeplicator: bad master url %q", metaURL)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("georeplicator: bad master url %q: %w", metaURL, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p+offset <= 0 || p+offset > 65535 {
		return "", fmt.Errorf("georeplicator: bad port in master url %q", metaURL)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+offset)), nil
}
