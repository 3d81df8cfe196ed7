package bundle

import (
	"fmt"

	"metaq/broker"
)

// startGateway gives the broker its write gateway (broker/gateway.go):
// while this bundle is a replica (its write gate's replicaHolder refuses
// client writes), puts to topics forwarded at this site ([site]
// forwardPuts, a topic's forwardPuts) are carried to the master its
// brokerId registered in ZooKeeper, over one connection, and answered with
// the master's answer. A topic not forwarded is refused as before; a
// master never forwards (no replicaHolder refusal). A samsa slave
// (gregor) and a bundle without ZooKeeper have no gateway.
func (b *Bundle) startGateway() error {
	if b.opts.Mode == ModeGregor || b.Registry == nil {
		return nil
	}
	if _, err := b.Broker.SetGateway(&broker.GatewayOptions{
		Holder: replicaHolder,
		Master: b.newMasterAddr,
	}); err != nil {
		return fmt.Errorf("bundle: write gateway: %w", err)
	}
	return nil
}
