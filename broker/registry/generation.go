package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
)

// generationNode is the persistent node under <root>/brokers/ids/<id> that
// holds the brokerId's master generation (a decimal number): every change
// of master raises it (see georeplicator.Identity).
const generationNode = "generation"

// GenerationPath is <root>/brokers/ids/<id>/generation.
func (p Paths) GenerationPath(brokerID int) string {
	return p.BrokerID(brokerID) + "/" + generationNode
}

// Generation reads the brokerId's master generation; 0 when none was ever raised.
func (r *Registry) Generation(ctx context.Context, brokerID int) (uint64, error) {
	gen, _, err := r.readGeneration(ctx, brokerID)
	if errors.Is(err, ErrNoNode) {
		return 0, nil
	}
	return gen, err
}

func (r *Registry) readGeneration(ctx context.Context, brokerID int) (uint64, int32, error) {
	path := r.paths.GenerationPath(brokerID)
	data, st, err := r.Get(ctx, path)
	if err != nil {
		return 0, 0, err
	}
	gen, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("registry: %s holds %q, not a generation: %w", path, data, err)
	}
	return gen, st.Version, nil
}

// RaiseGeneration sets the brokerId's generation to one above both the
// stored one and known, with a compare-and-set on the node's version, and
// returns it: of two sites raising at once, each gets its own number.
func (r *Registry) RaiseGeneration(ctx context.Context, brokerID int, known uint64) (uint64, error) {
	path := r.paths.GenerationPath(brokerID)
	for {
		cur, version, err := r.readGeneration(ctx, brokerID)
		if errors.Is(err, ErrNoNode) {
			next := known + 1
			err := r.createGeneration(ctx, path, next)
			if errors.Is(err, ErrNodeExists) {
				continue // another site raised it first
			}
			if err != nil {
				return 0, err
			}
			return next, nil
		}
		if err != nil {
			return 0, err
		}
		next := max(cur, known) + 1
		err = r.call(ctx, func() error {
			_, err := r.conn.Set(path, []byte(strconv.FormatUint(next, 10)), version)
			return err
		})
		if errors.Is(err, zk.ErrBadVersion) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("registry: set %s: %w", path, err)
		}
		return next, nil
	}
}

// createGeneration creates the generation node at path holding gen (and
// its parents). It fails with ErrNodeExists when another site created it
// first.
func (r *Registry) createGeneration(ctx context.Context, path string, gen uint64) error {
	if err := r.createParents(ctx, path); err != nil {
		return err
	}
	err := r.call(ctx, func() error {
		_, err := r.conn.Create(path, []byte(strconv.FormatUint(gen, 10)), 0, openACL)
		return err
	})
	if err != nil && !errors.Is(err, ErrNodeExists) {
		return fmt.Errorf("registry: create %s: %w", path, err)
	}
	return err
}

// ErrGenerationMoved: the brokerId's generation is no longer the one a
// site expected to raise (another site was promoted first).
var ErrGenerationMoved = errors.New("registry: the generation moved")

// RaiseGenerationFrom sets the brokerId's generation to known+1 only if it
// is not above known (never raised counts as 0), with a compare-and-set on
// the node's version; otherwise it fails with ErrGenerationMoved naming the
// current one. Of two sites promoting themselves from the same master at
// once, exactly one succeeds.
func (r *Registry) RaiseGenerationFrom(ctx context.Context, brokerID int, known uint64) (uint64, error) {
	path := r.paths.GenerationPath(brokerID)
	next := known + 1
	cur, version, err := r.readGeneration(ctx, brokerID)
	switch {
	case errors.Is(err, ErrNoNode):
		err := r.createGeneration(ctx, path, next)
		if errors.Is(err, ErrNodeExists) {
			return 0, fmt.Errorf("%w: another site raised %s first", ErrGenerationMoved, path)
		}
		if err != nil {
			return 0, err
		}
		return next, nil
	case err != nil:
		return 0, err
	}
	if cur > known {
		return 0, fmt.Errorf("%w: %s is %d, not the %d this site knows", ErrGenerationMoved, path, cur, known)
	}
	err = r.call(ctx, func() error {
		_, err := r.conn.Set(path, []byte(strconv.FormatUint(next, 10)), version)
		return err
	})
	if errors.Is(err, zk.ErrBadVersion) {
		return 0, fmt.Errorf("%w: another site raised %s first", ErrGenerationMoved, path)
	}
	if err != nil {
		return 0, fmt.Errorf("registry: set %s: %w", path, err)
	}
	return next, nil
}
