package broker

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"metaq/broker/wire"
)

// Refusal is why the broker refuses client writes. While one is in effect
// every plain put, transactional put and transaction commit is answered
// with it (code 403, or 503 when Retry) inside MetaQ's put failure text,
// `Put message to [broker '<url>'] [partition '<topic>-<n>'] failed.Detail:<Reason>`,
// and nothing is stored. Replication into the store (a sync master's
// `sync` commands, the georeplicator) is not a client write and passes.
//
// MetaQ's Java producer treats every failed put alike (it tries again, up
// to three times, picking the partition again, and reports the failure),
// while this project's client retries only 503: use Retry when the
// condition is expected to pass by itself soon (a site switching over, a
// disk being freed), and leave it unset when the client has to go
// elsewhere (a slave).
type Refusal struct {
	Reason string // said to the client, e.g. "this broker is a slave of meta://host:8123"
	Retry  bool   // 503 rather than 403
}

func (r *Refusal) code() int {
	if r.Retry {
		return wire.StatusServiceUnavailable
	}
	return wire.StatusForbidden
}

// Error makes a Refusal the error of a write refused in-process
// (Broker.StoreValidated).
func (r *Refusal) Error() string { return "broker: writes refused: " + r.Reason }

// writeGate is the set of refusals in effect, by holder. Several parts of
// a deployment may refuse writes independently (the slave role, a failover
// fence, a full disk); writes pass only once every holder has withdrawn.
// The put route reads the refusal in effect with one atomic load.
type writeGate struct {
	mu      sync.Mutex
	holders map[string]Refusal
	// current is the refusal answered, nil while writes pass: the first
	// holder in name order among those that do not Retry, else among all.
	current atomic.Pointer[Refusal]
	// check, when set, is asked at every client write that no holder
	// refuses (SetWriteCheck).
	check atomic.Pointer[func() *Refusal]
	// holding is the set of holders that refuse writes, replaced whole
	// under mu: the write gateway (gateway.go) forwards only while its
	// holder refuses.
	holding atomic.Pointer[map[string]bool]
	// refusals counts the calls to RefuseWrites. A write that reads it
	// before its gate check and again once it reached the store learns
	// whether writes were stopped in between (gatePass): a switchover
	// makes its log durable right after refusing, so such a write may
	// have landed after the point the new master starts from.
	refusals atomic.Uint64
}

// gatePass is a client write's passage through the write gate: the count
// of refusals (writeGate.refusals) read before its gate check. The gate
// check and the hand-off to the store are two steps, and a refusal can
// come between them; a write that takes its pass before the check and
// compares it (stoppedSince) once the store took it knows whether one did.
// If none did, any refusal came after the hand-off, and so did the log
// flush a switchover makes right after refusing: the new master starts
// from a point that covers the write. If one did, the write may lie past
// that point, and its outcome is unknown to whoever asked for it (the
// store step itself cannot tell). A write that finds the gate stopped
// before its hand-off checks the gate again (Broker.regate) instead of
// storing what the gate would refuse now. Both the put route (put.go) and
// a transaction's commit (Broker.StoreValidatedGroup) go through this.
type gatePass uint64

// pass takes a write's gatePass; the caller reads the gate after it.
func (g *writeGate) pass() gatePass { return gatePass(g.refusals.Load()) }

// stoppedSince reports whether writes began to be refused (RefuseWrites)
// after p was taken.
func (g *writeGate) stoppedSince(p gatePass) bool { return g.refusals.Load() != uint64(p) }

// refusedBy reports whether holder refuses client writes now.
func (g *writeGate) refusedBy(holder string) bool {
	m := g.holding.Load()
	return m != nil && (*m)[holder]
}

// SetWriteCheck makes the broker ask check at every client write that no
// holder refuses; a non-nil Refusal refuses it. It must be cheap (it runs
// on the put route) and take no broker lock. nil removes it. A master uses
// it to acknowledge nothing while it cannot confirm that it still is the
// master: the condition is a matter of time (since its last confirmation),
// which no holder set in advance can express.
func (b *Broker) SetWriteCheck(check func() *Refusal) {
	if check == nil {
		b.gate.check.Store(nil)
		return
	}
	b.gate.check.Store(&check)
}

// RefuseWrites makes the broker refuse client writes with r until
// AllowWrites(holder) (see Refusal). holder names who refuses ("slave",
// "failover", "disk"); calling again for the same holder replaces its
// reason. Writes already past the gate finish.
func (b *Broker) RefuseWrites(holder string, r Refusal) {
	g := &b.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holders == nil {
		g.holders = make(map[string]Refusal)
	}
	g.holders[holder] = r
	g.updateLocked()
	// Counted after the refusal is in effect: a write that passed the
	// gate before it and reads the count after reaching the store sees
	// the count raised unless the refusal came after its store hand-off.
	g.refusals.Add(1)
	b.log.Warn("BROKER: refusing client writes", "holder", holder, "reason", r.Reason, "retry", r.Retry)
}

// UpdateRefusal replaces holder's refusal with r only while holder still
// refuses writes, and reports whether it did: a refusal that names
// something that changes (the master a replica follows) is kept current
// without the risk of refusing writes again after AllowWrites.
func (b *Broker) UpdateRefusal(holder string, r Refusal) bool {
	g := &b.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	old, ok := g.holders[holder]
	if !ok {
		return false
	}
	if old == r {
		return true
	}
	g.holders[holder] = r
	g.updateLocked()
	b.log.Info("BROKER: refusal updated", "holder", holder, "reason", r.Reason, "retry", r.Retry)
	return true
}

// AllowWrites withdraws holder's refusal; writes pass again once no holder
// refuses them.
func (b *Broker) AllowWrites(holder string) {
	g := &b.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.holders[holder]; !ok {
		return
	}
	delete(g.holders, holder)
	g.updateLocked()
	b.log.Info("BROKER: client writes no longer refused", "holder", holder, "refusing", len(g.holders))
}

// WriteRefusal returns the refusal client writes get, or nil while they
// are accepted.
func (b *Broker) WriteRefusal() *Refusal {
	if r := b.writeRefusal(); r != nil {
		cp := *r
		return &cp
	}
	return nil
}

func (b *Broker) writeRefusal() *Refusal {
	if r := b.gate.current.Load(); r != nil {
		return r
	}
	if c := b.gate.check.Load(); c != nil {
		return (*c)()
	}
	return nil
}

// updateLocked recomputes current; the caller holds g.mu.
func (g *writeGate) updateLocked() {
	set := make(map[string]bool, len(g.holders))
	for h := range g.holders {
		set[h] = true
	}
	g.holding.Store(&set)
	var pick *Refusal
	for _, h := range slices.Sorted(maps.Keys(g.holders)) {
		r := g.holders[h]
		if pick == nil || (pick.Retry && !r.Retry) {
			pick = &r
		}
	}
	g.current.Store(pick)
}
