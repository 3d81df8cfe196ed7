package siterole

import (
	"fmt"
	"sync"
	"time"
)

// Role is what a site is for its brokerId.
type Role int

const (
	// Master takes puts and ships its log to the slave sites.
	Master Role = iota
	// Slave follows the master of its brokerId and refuses puts.
	Slave
)

func (r Role) String() string {
	if r == Slave {
		return "slave"
	}
	return "master"
}

// State is a site's role and what goes with it.
type State struct {
	Role Role
	// Generation is the master generation this site serves (Master) or last
	// followed (Slave); 0 before any failover.
	Generation uint64
	// SlaveID and SlaveGroup name this site's slave (Slave only).
	SlaveID    int
	SlaveGroup string
	// Master names the master a slave follows, for messages ("" = its
	// configured master).
	Master string
	// SteppedDown: a master that saw a newer generation elsewhere; it
	// acknowledges nothing and is about to become a slave.
	SteppedDown bool
	// Since is when this state was set; Why says what set it.
	Since time.Time
	Why   string
}

// IsMaster reports whether the site is a master that has not stepped down.
func (s State) IsMaster() bool { return s.Role == Master && !s.SteppedDown }

func (s State) String() string {
	switch {
	case s.Role == Slave:
		return fmt.Sprintf("slave %d (%s) at generation %d", s.SlaveID, s.SlaveGroup, s.Generation)
	case s.SteppedDown:
		return fmt.Sprintf("master of generation %d, stepped down", s.Generation)
	}
	return fmt.Sprintf("master of generation %d", s.Generation)
}

// Transition is a change of role in progress.
type Transition string

// The transitions; one runs at a time.
const (
	None        Transition = ""
	Promoting   Transition = "promoting"    // a slave becomes master
	HandingOver Transition = "handing over" // a master hands over (switchover), then follows
	Demoting    Transition = "demoting"     // a master becomes a slave of a newer one
)

// Machine holds a site's role. Its zero value is not usable: use New.
type Machine struct {
	mu      sync.Mutex
	cur     State
	busy    Transition
	changed chan struct{} // closed and replaced at every change
	closed  bool
}

// New starts a machine in the given state (the role the bundle starts
// with, after the role its data directory recorded).
func New(initial State) *Machine {
	if initial.Since.IsZero() {
		initial.Since = time.Now()
	}
	return &Machine{cur: initial, changed: make(chan struct{})}
}

// Current is the site's role now.
func (m *Machine) Current() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// CurrentAndBusy is the role and the transition in progress, read
// together (a promotion sets the role, then ends its transition).
func (m *Machine) CurrentAndBusy() (State, Transition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur, m.busy
}

// Busy is the transition in progress, None when there is none.
func (m *Machine) Busy() Transition {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.busy
}

// Changed is closed at the next change of the state or of the transition
// in progress.
func (m *Machine) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changed
}

// ErrBusy refuses a transition while another runs.
type ErrBusy struct{ Running, Wanted Transition }

func (e *ErrBusy) Error() string {
	return fmt.Sprintf("cannot start %s: this site is %s", e.Wanted, e.Running)
}

// Begin starts transition t, refused while another runs or once the
// machine is closed. end finishes it; it may be called more than once.
func (m *Machine) Begin(t Transition) (end func(), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, fmt.Errorf("cannot start %s: the bundle is stopping", t)
	}
	if m.busy != None {
		return nil, &ErrBusy{Running: m.busy, Wanted: t}
	}
	m.busy = t
	m.notifyLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.busy == t {
				m.busy = None
				m.notifyLocked()
			}
		})
	}, nil
}

// Set records the role a transition reached.
func (m *Machine) Set(s State) {
	if s.Since.IsZero() {
		s.Since = time.Now()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cur = s
	m.notifyLocked()
}

// StepDown marks a master that saw generation newer elsewhere; it changes
// nothing on a slave or when newer is not above the generation held.
// It reports whether the state changed.
func (m *Machine) StepDown(newer uint64, why string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur.Role != Master || m.cur.SteppedDown || newer <= m.cur.Generation {
		return false
	}
	m.cur.SteppedDown, m.cur.Since, m.cur.Why = true, time.Now(), why
	m.notifyLocked()
	return true
}

// Close refuses every later transition (the bundle stops).
func (m *Machine) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
}

func (m *Machine) notifyLocked() {
	close(m.changed)
	m.changed = make(chan struct{})
}
