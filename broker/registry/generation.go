package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
// returns it: of two sites raising at once, each gets its own number. The
// raiser is recorded beside it (see raise).
func (r *Registry) RaiseGeneration(ctx context.Context, brokerID int, known uint64) (uint64, error) {
	token, err := NewRaiseToken()
	if err != nil {
		return 0, err
	}
	gen, _, err := r.raise(ctx, brokerID, known, 0, false, r.opts.Site, token)
	return gen, err
}

// ErrGenerationMoved: the brokerId's generation is no longer the one a
// site expected to raise (another site was promoted first).
var ErrGenerationMoved = errors.New("registry: the generation moved")

// RaiseGenerationFrom sets the brokerId's generation to known+1 only if it
// is not above known (never raised counts as 0), with a compare-and-set on
// the node's version; otherwise it fails with ErrGenerationMoved naming the
// current one. Of two sites promoting themselves from the same master at
// once, exactly one succeeds. The raiser is recorded beside it (see raise).
func (r *Registry) RaiseGenerationFrom(ctx context.Context, brokerID int, known uint64) (uint64, error) {
	token, err := NewRaiseToken()
	if err != nil {
		return 0, err
	}
	gen, _, err := r.raise(ctx, brokerID, known, 0, true, r.opts.Site, token)
	return gen, err
}

// RaiseGenerationFromAs is RaiseGenerationFrom with the raiser given (its
// Site and Token, from NewRaiseToken; a session to another site's ensemble
// has no site of its own): a promotion that raises the generation in
// several ensembles writes the same raiser in each, so that it can undo
// its wins (UndoRaise) and carry them into the others
// (RaiseGenerationToBy).
func (r *Registry) RaiseGenerationFromAs(ctx context.Context, brokerID int, known uint64, by Raiser) (uint64, error) {
	gen, _, err := r.raise(ctx, brokerID, known, 0, true, by.Site, by.Token)
	return gen, err
}

// RaiseGenerationFromToAs is RaiseGenerationFromAs to generation gen
// (above known) instead of known+1: a promotion that cannot reach every
// site's ensemble takes the next number of its site's class, which may
// skip some. It returns the generation, and its raiser when known, that
// the raise replaced (read at the version its compare-and-set checked),
// for UndoRaise to set back exactly.
func (r *Registry) RaiseGenerationFromToAs(ctx context.Context, brokerID int, known, gen uint64, by Raiser) (Raiser, error) {
	if gen <= known {
		return Raiser{}, fmt.Errorf("registry: raise generation from %d to %d: not above it", known, gen)
	}
	_, prev, err := r.raise(ctx, brokerID, known, gen, true, by.Site, by.Token)
	return prev, err
}

// raise is RaiseGeneration (from false) and RaiseGenerationFrom (from
// true). The new generation and who raised it (Options.Site and a token
// of this call, the raiserNode) are written in one multi-op. A write whose
// answer is lost (the connection drops after ZooKeeper committed it, or
// ctx ends while it is in flight) has an unknown outcome: raise reads the
// nodes again until it can tell, and a generation whose raiser node holds
// this call's token is this call's. Without that, a promotion whose raise
// committed but whose answer was lost would leave the generation with no
// owner: the old master steps down when it reads it, and the promoting
// site believes it failed.
//
// target, when not 0, is the generation a raise from known writes instead
// of known+1. The Raiser returned is the generation (and raiser, when the
// raiser node names it) the write replaced.
func (r *Registry) raise(ctx context.Context, brokerID int, known, target uint64, from bool, site, token string) (uint64, Raiser, error) {
	path := r.paths.GenerationPath(brokerID)
	rpath := r.paths.RaiserPath(brokerID)
	for {
		cur, version, err := r.readGeneration(ctx, brokerID)
		exists := err == nil
		switch {
		case errors.Is(err, ErrNoNode):
			cur = 0
		case err != nil:
			return 0, Raiser{}, err
		}
		if from && cur > known {
			return 0, Raiser{}, fmt.Errorf("%w: %s is %d, not the %d this site knows", ErrGenerationMoved, path, cur, known)
		}
		next := max(cur, known) + 1
		if from {
			next = known + 1
			if target > known {
				next = target
			}
		}
		prev := Raiser{Generation: cur}
		if by, err := r.readRaiser(ctx, brokerID); err == nil && by.Generation == cur {
			prev = by
		}
		werr := r.writeRaise(ctx, path, rpath, exists, version, next, site, token)
		if werr == nil {
			return next, prev, nil
		}
		if !definiteZKError(werr) {
			// The outcome is unknown: find out whether the write committed.
			mine, err := r.awaitRaiseOutcome(ctx, brokerID, next, token)
			if err != nil {
				return 0, prev, &RaiseUnknownError{Path: path, Generation: next, Token: token,
					Err: fmt.Errorf("the answer was lost (%w) and the outcome could not be read back: %w", werr, err)}
			}
			if mine {
				r.log.Warn("REGISTRY: the answer to raising the generation was lost; it had committed", "path", path, "generation", next, "err", werr)
				return next, prev, nil
			}
			continue // not written: read again and retry (or find it moved)
		}
		if !errors.Is(werr, zk.ErrBadVersion) && !errors.Is(werr, ErrNodeExists) && !errors.Is(werr, ErrNoNode) {
			return 0, Raiser{}, fmt.Errorf("registry: raise %s to %d: %w", path, next, werr)
		}
		if from {
			// Another site raised it (or created it) first; the next read
			// tells which generation, unless it only wrote the raiser.
			if g, err := r.Generation(ctx, brokerID); err == nil && g > known {
				return 0, Raiser{}, fmt.Errorf("%w: another site raised %s first (now %d)", ErrGenerationMoved, path, g)
			}
		}
	}
}

// writeRaise writes generation gen at path (created when !exists, else
// set at version) and its raiser at rpath, in one multi-op.
func (r *Registry) writeRaise(ctx context.Context, path, rpath string, exists bool, version int32, gen uint64, site, token string) error {
	if err := r.createParents(ctx, path); err != nil {
		return err
	}
	rok, _, err := r.Exists(ctx, rpath)
	if err != nil {
		return err
	}
	val := []byte(strconv.FormatUint(gen, 10))
	raiser, err := json.Marshal(Raiser{Generation: gen, Site: site, Token: token})
	if err != nil {
		return err
	}
	ops := make([]any, 0, 2)
	if exists {
		ops = append(ops, &zk.SetDataRequest{Path: path, Data: val, Version: version})
	} else {
		ops = append(ops, &zk.CreateRequest{Path: path, Data: val, Acl: openACL})
	}
	if rok {
		ops = append(ops, &zk.SetDataRequest{Path: rpath, Data: raiser, Version: -1})
	} else {
		ops = append(ops, &zk.CreateRequest{Path: rpath, Data: raiser, Acl: openACL})
	}
	return r.call(ctx, func() error {
		_, err := r.conn.Multi(ops...)
		return err
	})
}

// RaiseUnknownError: a raise's answer was lost and reading the nodes back
// did not tell whether it committed (ZooKeeper stayed away); RaiseOutcome
// tells later, by Token.
type RaiseUnknownError struct {
	Path       string
	Generation uint64
	Token      string
	Err        error
}

func (e *RaiseUnknownError) Error() string {
	return fmt.Sprintf("registry: raise %s to %d: %v", e.Path, e.Generation, e.Err)
}

func (e *RaiseUnknownError) Unwrap() error { return e.Err }

// RaiseOutcome reads once whether the raise of gen with token (a
// RaiseUnknownError's) committed: true when the raiser node names token at
// gen; false when the generation is below gen (it did not) or another
// raise holds gen or a newer one.
func (r *Registry) RaiseOutcome(ctx context.Context, brokerID int, gen uint64, token string) (bool, error) {
	cur, err := r.Generation(ctx, brokerID)
	if err != nil {
		return false, err
	}
	if cur < gen {
		return false, nil
	}
	by, err := r.readRaiser(ctx, brokerID)
	if err != nil && !errors.Is(err, ErrNoNode) {
		return false, err
	}
	return by.Generation == gen && by.Token == token, nil
}

// definiteZKError reports whether err is ZooKeeper's answer that a write
// was not applied (as opposed to a lost connection or an ended context,
// after which it may have been).
func definiteZKError(err error) bool {
	for _, e := range []error{zk.ErrBadVersion, ErrNodeExists, ErrNoNode, zk.ErrNoAuth, zk.ErrBadArguments, zk.ErrInvalidACL, ErrClosed} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// raiseOutcomeWait bounds how long raise reads back a write whose answer
// was lost when its own context has ended.
const raiseOutcomeWait = 10 * time.Second

// awaitRaiseOutcome reads the generation and its raiser until it can tell
// whether this call's write of gen (token) committed: mine when the raiser
// node names token at gen; not mine when the generation is below gen (not
// written) or the raiser node names another raise of gen or above.
func (r *Registry) awaitRaiseOutcome(ctx context.Context, brokerID int, gen uint64, token string) (bool, error) {
	if ctx.Err() != nil {
		// The write was cut short by ctx, not by ZooKeeper: the reads
		// need their own bound.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), raiseOutcomeWait)
		defer cancel()
	}
	for {
		mine, err := r.RaiseOutcome(ctx, brokerID, gen, token)
		if err == nil {
			return mine, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("%w (last read: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// raiserNode is the persistent node beside the generation node that says
// who raised the generation last (JSON, Raiser). Every write of the
// generation writes it in the same multi-op (a raise, a mirror's
// RaiseGenerationToBy); a generation node without it, or with a raiser of
// another generation, was written by an older version: its raiser is
// unknown.
const raiserNode = "generation-raiser"

// RaiserPath is <root>/brokers/ids/<id>/generation-raiser.
func (p Paths) RaiserPath(brokerID int) string {
	return p.BrokerID(brokerID) + "/" + raiserNode
}

// Raiser is who raised a brokerId's generation: the site (Options.Site)
// and a token unique to the raise.
type Raiser struct {
	Generation uint64 `json:"generation"`
	Site       string `json:"site"`
	Token      string `json:"token"`
	// Abandoned: the raiser gave up its promotion to this generation
	// (AbandonGeneration); nobody is its master, and the master that
	// stepped down for it may take mastership back at the next one.
	Abandoned bool `json:"abandoned,omitempty"`
	// GivenBack is the generation of a raise given back here (UndoRaise
	// writes it with the raiser it sets back), GivenBackBy its site: a
	// master that read that number before the give-back stepped down for
	// it, and may take mastership back (siterole.ReclaimGivenBack).
	GivenBack   uint64 `json:"givenBack,omitempty"`
	GivenBackBy string `json:"givenBackBy,omitempty"`
}

// AbandonGeneration records that this broker's site gives up its
// promotion to generation gen (Raiser.Abandoned), only while the
// brokerId's generation is still gen (a check on its version in the same
// multi-op); ErrGenerationMoved when it is not.
func (r *Registry) AbandonGeneration(ctx context.Context, brokerID int, gen uint64) error {
	path, rpath := r.paths.GenerationPath(brokerID), r.paths.RaiserPath(brokerID)
	cur, version, err := r.readGeneration(ctx, brokerID)
	if err != nil {
		return err
	}
	if cur != gen {
		return fmt.Errorf("%w: %s is %d, not the %d given up", ErrGenerationMoved, path, cur, gen)
	}
	by, err := r.readRaiser(ctx, brokerID)
	if err != nil && !errors.Is(err, ErrNoNode) {
		return err
	}
	exists := err == nil
	if by.Generation != gen {
		by = Raiser{Generation: gen}
	}
	if by.Site == "" {
		by.Site = r.opts.Site
	}
	by.Abandoned = true
	data, err := json.Marshal(by)
	if err != nil {
		return err
	}
	var op any = &zk.CreateRequest{Path: rpath, Data: data, Acl: openACL}
	if exists {
		op = &zk.SetDataRequest{Path: rpath, Data: data, Version: -1}
	}
	err = r.call(ctx, func() error {
		_, err := r.conn.Multi(&zk.CheckVersionRequest{Path: path, Version: version}, op)
		return err
	})
	if errors.Is(err, zk.ErrBadVersion) {
		return fmt.Errorf("%w: %s changed", ErrGenerationMoved, path)
	}
	if err != nil {
		return fmt.Errorf("registry: mark generation %d abandoned at %s: %w", gen, rpath, err)
	}
	return nil
}

// GenerationRaiser reads the brokerId's generation and who raised it; the
// Raiser is zero when the raiser is unknown (never raised, or written by
// an older version). A mirrored generation names the site that holds it,
// with the token of its raise when the master's own ensemble had one.
func (r *Registry) GenerationRaiser(ctx context.Context, brokerID int) (uint64, Raiser, error) {
	gen, err := r.Generation(ctx, brokerID)
	if err != nil {
		return gen, Raiser{}, err
	}
	// Generation 0 has a raiser node only when a raise from 0 was given
	// back (UndoRaise), which marks it.
	by, err := r.readRaiser(ctx, brokerID)
	if errors.Is(err, ErrNoNode) || (err == nil && by.Generation != gen) {
		return gen, Raiser{}, nil
	}
	return gen, by, err
}

// readRaiser reads the raiser node (ErrNoNode when missing; a node that
// does not parse counts as an unknown raiser).
func (r *Registry) readRaiser(ctx context.Context, brokerID int) (Raiser, error) {
	data, _, err := r.Get(ctx, r.paths.RaiserPath(brokerID))
	if err != nil {
		return Raiser{}, err
	}
	var by Raiser
	if json.Unmarshal(data, &by) != nil {
		return Raiser{}, nil
	}
	return by, nil
}

// NewRaiseToken returns a token unique to one raise (Raiser.Token).
func NewRaiseToken() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("registry: raise token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// UndoRaise gives back a raise of the brokerId's generation to gen by the
// raise whose token is token (a promotion that won fewer than a majority
// of the deployment's ensembles): the generation is set back to
// prev.Generation (the generation before the raise, as
// RaiseGenerationFromToAs returns it; gen-1 when prev holds none below
// gen) and the raiser node to prev (unknown when its Site is
// empty), in one multi-op checked on both nodes' versions, only while the
// nodes still hold that raise; the raiser node set back carries the mark
// of the give-back (Raiser.GivenBack). It reports false, and changes nothing,
// when they do not any more (another raise moved them, or the raise did
// not commit there). A raise to the next number of a site's class may
// have skipped numbers: setting it back to gen-1 would leave a generation
// nobody raised, for which the master of prev.Generation steps down.
func (r *Registry) UndoRaise(ctx context.Context, brokerID int, gen uint64, token string, prev Raiser) (bool, error) {
	path, rpath := r.paths.GenerationPath(brokerID), r.paths.RaiserPath(brokerID)
	cur, version, err := r.readGeneration(ctx, brokerID)
	if errors.Is(err, ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	data, rst, err := r.Get(ctx, rpath)
	if errors.Is(err, ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var by Raiser
	if cur != gen || json.Unmarshal(data, &by) != nil || by.Generation != gen || by.Token != token {
		return false, nil
	}
	if prev.Generation >= gen {
		prev = Raiser{Generation: gen - 1}
	}
	// The mark of the give-back: nothing else would tell a master that
	// stepped down for gen that nobody will be its master.
	prev.GivenBack, prev.GivenBackBy = gen, by.Site
	pdata, err := json.Marshal(prev)
	if err != nil {
		return false, err
	}
	err = r.call(ctx, func() error {
		_, err := r.conn.Multi(
			&zk.SetDataRequest{Path: path, Data: []byte(strconv.FormatUint(prev.Generation, 10)), Version: version},
			&zk.SetDataRequest{Path: rpath, Data: pdata, Version: rst.Version})
		return err
	})
	if errors.Is(err, zk.ErrBadVersion) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry: set %s back from %d to %d: %w", path, gen, prev.Generation, err)
	}
	return true, nil
}

// RaiseGenerationToBy raises the brokerId's generation to gen with by as
// its raiser, where it holds less, with a compare-and-set on both nodes,
// and returns the generation the node holds afterwards and its raiser.
// Where it holds gen already with another raiser, it writes by there too
// only when overwrite (the caller owns gen: it won a majority of the
// ensembles, and the other raise there lost and is given up); otherwise it
// leaves it and returns that raiser.
func (r *Registry) RaiseGenerationToBy(ctx context.Context, brokerID int, gen uint64, by Raiser, overwrite bool) (uint64, Raiser, error) {
	path, rpath := r.paths.GenerationPath(brokerID), r.paths.RaiserPath(brokerID)
	by.Generation = gen
	val := []byte(strconv.FormatUint(gen, 10))
	bdata, err := json.Marshal(by)
	if err != nil {
		return 0, Raiser{}, err
	}
	if err := r.createParents(ctx, path); err != nil {
		return 0, Raiser{}, err
	}
	for {
		cur, version, err := r.readGeneration(ctx, brokerID)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNoNode) {
			return 0, Raiser{}, err
		}
		data, rst, rerr := r.Get(ctx, rpath)
		rexists := rerr == nil
		if rerr != nil && !errors.Is(rerr, ErrNoNode) {
			return 0, Raiser{}, rerr
		}
		var held Raiser
		if rexists && json.Unmarshal(data, &held) != nil {
			held = Raiser{}
		}
		if held.Generation != cur {
			held = Raiser{}
		}
		if exists && (cur > gen || (cur == gen && (held.Token == by.Token || !overwrite))) {
			return cur, held, nil
		}
		ops := make([]any, 0, 2)
		switch {
		case !exists:
			ops = append(ops, &zk.CreateRequest{Path: path, Data: val, Acl: openACL})
		case cur < gen:
			ops = append(ops, &zk.SetDataRequest{Path: path, Data: val, Version: version})
		default: // gen held by a raise that lost: keep the number, check it
			ops = append(ops, &zk.CheckVersionRequest{Path: path, Version: version})
		}
		if rexists {
			ops = append(ops, &zk.SetDataRequest{Path: rpath, Data: bdata, Version: rst.Version})
		} else {
			ops = append(ops, &zk.CreateRequest{Path: rpath, Data: bdata, Acl: openACL})
		}
		err = r.call(ctx, func() error { _, err := r.conn.Multi(ops...); return err })
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, ErrNodeExists) || errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return 0, Raiser{}, fmt.Errorf("registry: raise %s to %d (raised by %s): %w", path, gen, by.Site, err)
		}
		return gen, by, nil
	}
}

// MasterOfGeneration reads the brokerId's generation and whether a master
// is registered at it: ids/<id>/master exists and was created after the
// generation node took its value (a promotion raises the generation before
// it registers, and a master's mirror carries its generation into another
// site's ensemble before its registration). A master node older than the
// generation is a superseded master's (or a dead one's, until its session
// expires), not a master of it.
func (r *Registry) MasterOfGeneration(ctx context.Context, brokerID int) (uint64, bool, error) {
	path := r.paths.GenerationPath(brokerID)
	data, gst, err := r.Get(ctx, path)
	if errors.Is(err, ErrNoNode) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	gen, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("registry: %s holds %q, not a generation: %w", path, data, err)
	}
	ok, mst, err := r.Exists(ctx, r.paths.Broker(brokerID, -1))
	if err != nil {
		return gen, false, err
	}
	return gen, ok && mst.Czxid > gst.Mzxid, nil
}
