package bundle

import "testing"

// TestHalfDemotedPromotedSlaveRunsNothing: a site started as a slave and
// promoted at run time, whose demotion stopped the promotion's shipper and
// then failed before its receiver started (ZooKeeper closed the connection
// while it registered as a slave), runs neither a shipper nor a receiver.
// The role owner named the configured receiver, closed by the promotion,
// as the one that runs, so every retry of the demotion answered "this site
// is already a slave" and the site stayed a master with nothing running
// for good (fault schedule seed 900015: two masters after the heal).
func TestHalfDemotedPromotedSlaveRunsNothing(t *testing.T) {
	configured := newReceiverComponent()
	o := newRoleOwner(func() (*shipperComponent, *receiverComponent) { return nil, configured })
	if o.receiver() != configured || o.shipper() != nil {
		t.Fatalf("a slave as started: receiver %p shipper %p, want the configured receiver only", o.receiver(), o.shipper())
	}
	o.setPromoted(newShipperComponent())
	if o.receiver() != nil || o.shipper() == nil {
		t.Fatalf("promoted: receiver %p shipper %p, want the promotion's shipper only", o.receiver(), o.shipper())
	}
	ran, err := o.stopShipper()
	if !ran || err != nil {
		t.Fatalf("stopShipper: ran %v err %v", ran, err)
	}
	if rc := o.receiver(); rc != nil {
		t.Fatalf("half demoted: receiver() is %p (the configured one, closed by the promotion), want none", rc)
	}
	if sc := o.shipper(); sc != nil {
		t.Fatalf("half demoted: shipper() is %p, want none", sc)
	}
}
