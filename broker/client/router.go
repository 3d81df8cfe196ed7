package client

import (
	"context"
	"errors"
	"time"
)

// ReadPreference says which replica of a partition a consumer would rather
// read from when it has a choice.
type ReadPreference int

const (
	// MasterOnly reads from the partition's master and never from a slave.
	// Without a Router the client still falls back to a slave while the master
	// is absent, as the Java client does; with a Router the router decides.
	MasterOnly ReadPreference = iota
	// LocalFirst reads from a replica in the consumer's own site when one is
	// healthy and within MaxLag, otherwise from the master.
	LocalFirst
	// NearestHealthy reads from the closest healthy replica within MaxLag,
	// whichever site it is in.
	NearestHealthy
)

// String returns the preference's name as used in flags and logs.
func (p ReadPreference) String() string {
	switch p {
	case MasterOnly:
		return "master-only"
	case LocalFirst:
		return "local-first"
	case NearestHealthy:
		return "nearest-healthy"
	}
	return "unknown"
}

// ParseReadPreference parses the names String returns.
func ParseReadPreference(s string) (ReadPreference, error) {
	switch s {
	case "master-only", "masteronly", "MasterOnly", "":
		return MasterOnly, nil
	case "local-first", "localfirst", "LocalFirst":
		return LocalFirst, nil
	case "nearest-healthy", "nearesthealthy", "NearestHealthy":
		return NearestHealthy, nil
	}
	return MasterOnly, errors.New("client: unknown read preference " + s)
}

// Replica is one address that serves a broker id's partitions, as the client
// found it in ZooKeeper (or a static list).
type Replica struct {
	// Addr is host:port (without the meta:// scheme).
	Addr string
	// Master is true for the broker's master node, false for a slave.
	Master bool
	// SlaveID is the slave number (slave<n> in ZooKeeper), -1 for the master.
	SlaveID int
}

// RouteRequest asks a Router which address should serve one partition for a
// consumer. All fields are plain values so that implementations need not
// import anything else from the broker tree.
type RouteRequest struct {
	// Topic and Partition name the partition; BrokerID is the MetaQ broker id
	// that owns it (the X of the X-Y partition string).
	Topic     string
	BrokerID  int
	Partition int
	// Group is the consumer group asking.
	Group string
	// Site is the consumer's own site name (ConsumerOptions.Site), may be empty.
	Site string
	// Preference and MaxLag come from the consumer's options. MaxLag 0 means
	// no limit.
	Preference ReadPreference
	MaxLag     time.Duration
	// Replicas lists what the client itself knows for BrokerID: the master (if
	// registered) and its slaves. The router may return one of these or any
	// other address it knows.
	Replicas []Replica
}

// Router picks the broker address a consumer reads a partition from. It is the
// site-affinity hook: the topology package implements it from its site
// health and lag reports.
//
// Contract: Route may be called concurrently from many goroutines and must
// not block for long (it is called before every reconnect of a partition's
// fetch loop, not per fetch); it should honour ctx. It returns "host:port".
// Returning ErrNoRoute (or any error) makes the client fall back to its
// default choice (master first, a random slave while the master is absent).
type Router interface {
	Route(ctx context.Context, req RouteRequest) (addr string, err error)
}

// RouterFunc adapts a function to the Router interface.
type RouterFunc func(ctx context.Context, req RouteRequest) (string, error)

// Route calls f.
func (f RouterFunc) Route(ctx context.Context, req RouteRequest) (string, error) { return f(ctx, req) }

// ErrNoRoute is returned by a Router that has no opinion for a request; the
// client then uses its default choice.
var ErrNoRoute = errors.New("client: no route")
