package bundle

import (
	"context"
	"errors"
	"sync"

	"metaq/broker/config"
	"metaq/internal/siterole"
)

// roleOwner owns a site's role and what runs for it: the state machine
// every transition goes through (siterole.Machine: the role, the
// generation, the one transition in progress), the shipper a promotion
// started or the receiver a demotion started, and the slave configuration
// in effect. Transitions start and stop the shipper and the receiver
// through it; every other part of the bundle asks it what runs now
// (shipper, receiver, slaveConfig) and what the role is (Current), instead
// of the mode or the slave configuration the bundle started with.
//
// mu is a leaf: it guards the pointers only; components are started and
// closed with it released.
type roleOwner struct {
	*siterole.Machine
	// configured is the bundle's own shipper or receiver component, the
	// one the role it started with runs (nil when none runs).
	configured func() (*shipperComponent, *receiverComponent)

	mu sync.Mutex
	// promoted is the shipper a promotion started; demoted the receiver a
	// demotion started, as slave demotedID.
	promoted  *shipperComponent
	demoted   *receiverComponent
	demotedID int
	// leftConfigured: a transition at run time stopped the configured
	// component (a promotion started shipping, a demotion stopped the
	// shipper or started following), which never runs again. A demotion
	// that failed between stopping the shipper and starting its receiver
	// leaves neither promoted nor demoted: the site then runs nothing, and
	// the demotion is retried (runRejoin), not refused as a slave's.
	leftConfigured bool
	// slave is the slave configuration in effect, nil while master.
	slave *config.Slave
}

func newRoleOwner(configured func() (*shipperComponent, *receiverComponent)) *roleOwner {
	return &roleOwner{Machine: siterole.New(siterole.State{Role: siterole.Master, Why: "not started"}), configured: configured}
}

// start records the role the bundle starts in and its slave configuration
// (nil for a master).
func (o *roleOwner) start(st siterole.State, slave *config.Slave) {
	o.mu.Lock()
	o.slave = slave
	o.mu.Unlock()
	o.Set(st)
}

// isSlave reports whether the site is a slave now.
func (o *roleOwner) isSlave() bool { return o.Current().Role == siterole.Slave }

// slaveConfig is the slave configuration in effect, nil while master.
func (o *roleOwner) slaveConfig() *config.Slave {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.slave
}

// runtime is what a transition at run time started: the promotion's
// shipper, or the demotion's receiver and slaveId.
func (o *roleOwner) runtime() (sc *shipperComponent, rc *receiverComponent, slaveID int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.promoted, o.demoted, o.demotedID
}

// shipper is the shipper that runs now: the promotion's, else the
// configured one unless a demotion made this site a slave; nil on a slave.
func (o *roleOwner) shipper() *shipperComponent {
	sc, rc, _ := o.runtime()
	if sc != nil {
		return sc
	}
	if rc != nil || o.configuredStopped() {
		return nil
	}
	conf, _ := o.configured()
	return conf
}

// configuredStopped reports whether a transition at run time stopped the
// configured component (leftConfigured).
func (o *roleOwner) configuredStopped() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.leftConfigured
}

// receiver is the async-slave receiver that runs now: the demotion's,
// else the configured one unless a promotion made this site a master; nil
// on a master.
func (o *roleOwner) receiver() *receiverComponent {
	sc, rc, _ := o.runtime()
	if rc != nil {
		return rc
	}
	if sc != nil || o.configuredStopped() {
		return nil
	}
	_, conf := o.configured()
	return conf
}

// startShipper starts shipping this site's log as a promotion's master
// (the receiver it followed with is already stopped).
func (o *roleOwner) startShipper(ctx context.Context, b *Bundle) (*shipperComponent, error) {
	sc := newShipperComponent()
	sc.raised = true
	if err := sc.Start(ctx, b); err != nil {
		return nil, err
	}
	o.mu.Lock()
	o.promoted, o.demoted, o.leftConfigured = sc, nil, true
	o.mu.Unlock()
	return sc, nil
}

// becomeMaster records the role a promotion reached: no slave
// configuration from now on.
func (o *roleOwner) becomeMaster(st siterole.State) {
	o.mu.Lock()
	o.slave = nil
	o.mu.Unlock()
	o.Set(st)
}

// stopShipper stops the shipper that runs (a promotion's, else the
// configured one) for a demotion. It reports whether one ran.
func (o *roleOwner) stopShipper() (bool, error) {
	o.mu.Lock()
	sc := o.promoted
	o.promoted = nil
	demoted := o.demoted != nil
	left := o.leftConfigured
	o.leftConfigured = true
	o.mu.Unlock()
	if sc == nil && !demoted && !left {
		sc, _ = o.configured()
	}
	if sc == nil {
		return false, nil
	}
	return true, sc.Close()
}

// startReceiver makes this site follow a new master as the slave sl
// describes: the slave configuration is in effect before the receiver
// starts (status and gossip read it), and the receiver follows with the
// stream only (a former master's log may hold records to cut).
func (o *roleOwner) startReceiver(ctx context.Context, b *Bundle, sl *config.Slave) error {
	o.mu.Lock()
	o.slave = sl
	o.mu.Unlock()
	rc := newReceiverComponent()
	rc.streamOnly = true
	if err := rc.Start(ctx, b); err != nil {
		return err
	}
	o.mu.Lock()
	o.demoted, o.demotedID, o.leftConfigured = rc, sl.SlaveID, true
	o.mu.Unlock()
	return nil
}

// stopReceiver stops rc, the receiver a promotion takes over from; it
// stays the one receiver() names until startShipper replaces it.
func (o *roleOwner) stopReceiver(rc *receiverComponent) error { return rc.Close() }

// close stops what a transition at run time started (the bundle stops);
// the configured components are the bundle's to close.
func (o *roleOwner) close() error {
	o.Close()
	o.mu.Lock()
	sc, rc := o.promoted, o.demoted
	o.promoted, o.demoted = nil, nil
	o.mu.Unlock()
	var err error
	if rc != nil {
		err = rc.Close()
	}
	if sc != nil {
		err = errors.Join(err, sc.Close())
	}
	return err
}
