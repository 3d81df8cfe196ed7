package client

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"metaq/broker/registry"
)

// zkStore is the small set of ZooKeeper operations the client needs, so the
// balancing and offset logic does not depend on how ZooKeeper is reached.
// regStore implements it over broker/registry, the project's only
// ZooKeeper importer.
type zkStore interface {
	// children returns nil, nil for a missing node.
	children(ctx context.Context, p string) ([]string, error)
	// childrenWatch returns the children and a channel closed on the next
	// change of the child list (or of the session).
	childrenWatch(ctx context.Context, p string) ([]string, <-chan struct{}, error)
	// get returns the data; ok is false when the node does not exist.
	get(ctx context.Context, p string) (data []byte, ok bool, err error)
	// setPersistent writes a persistent node, creating it and its parents.
	setPersistent(ctx context.Context, p string, data []byte) error
	// ensurePath creates a persistent node and its parents if missing.
	ensurePath(ctx context.Context, p string) error
	// createEphemeral creates an ephemeral node (parents persistent); it
	// returns errNodeExists if the node exists.
	createEphemeral(ctx context.Context, p string, data []byte) error
	// deleteNode deletes a node; a missing node is not an error.
	deleteNode(ctx context.Context, p string) error
	// sessionRenewed is signalled (buffered 1) after a session expired and a
	// new one was established: ephemerals must be recreated, watches re-armed.
	sessionRenewed() <-chan struct{}
	close()
}

var errNodeExists = errors.New("client: znode exists")

// regStore implements zkStore over a registry.Registry that registers
// nothing of its own.
type regStore struct {
	r       *registry.Registry
	renewed chan struct{}
}

func dialZK(ctx context.Context, servers []string, root string, sessionTimeout, timeout time.Duration, log *slog.Logger) (*regStore, error) {
	r, err := registry.New(ctx, registry.Options{
		Connect:           strings.Join(servers, ","),
		Root:              root,
		SessionTimeout:    sessionTimeout,
		ConnectionTimeout: timeout,
		Logger:            log,
	})
	if err != nil {
		return nil, err
	}
	s := &regStore{r: r, renewed: make(chan struct{}, 1)}
	r.OnNewSession(func() {
		select {
		case s.renewed <- struct{}{}:
		default:
		}
	})
	return s, nil
}

func (s *regStore) close()                          { s.r.Close() }
func (s *regStore) sessionRenewed() <-chan struct{} { return s.renewed }

func (s *regStore) children(ctx context.Context, p string) ([]string, error) {
	c, err := s.r.Children(ctx, p)
	if errors.Is(err, registry.ErrNoNode) {
		return nil, nil
	}
	return c, err
}

func (s *regStore) childrenWatch(ctx context.Context, p string) ([]string, <-chan struct{}, error) {
	c, w, err := s.r.ChildrenW(ctx, p)
	return c, w, err
}

func (s *regStore) get(ctx context.Context, p string) ([]byte, bool, error) {
	d, _, err := s.r.Get(ctx, p)
	if errors.Is(err, registry.ErrNoNode) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return d, true, nil
}

func (s *regStore) setPersistent(ctx context.Context, p string, data []byte) error {
	return s.r.SetPersistent(ctx, p, data)
}

func (s *regStore) ensurePath(ctx context.Context, p string) error { return s.r.EnsurePath(ctx, p) }

func (s *regStore) createEphemeral(ctx context.Context, p string, data []byte) error {
	err := s.r.CreateEphemeral(ctx, p, data)
	if errors.Is(err, registry.ErrNodeExists) {
		return errNodeExists
	}
	return err
}

func (s *regStore) deleteNode(ctx context.Context, p string) error { return s.r.Delete(ctx, p) }

// normRoot makes a zkRoot start with / and not end with / (default /meta).
func normRoot(root string) string { return registry.NormalizeRoot(root) }
