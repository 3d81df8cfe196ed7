package bundle

import (
	"context"
	"fmt"

	"metaq/georeplicator"
)

// clampConsumerOffsets runs when this site is promoted, before it registers
// as master: a consumer group's committed offset of one of this brokerId's
// partitions beyond ends (what this site held at the promotion) was reached
// by reading records of the old master that never got here, and would point
// into, or past, the records this site stores at those offsets from now on:
// the consumer would skip them, or fetch from inside one. Each such offset is
// set back to the end (msgId -1, "moved without consuming"), so a consumer
// that loads its offset again when the master changes (the Java client does
// when the old master's partitions disappear) reads everything this site
// stores. The broker moves a consumer that keeps such an offset in memory
// (broker/divergence.go, in memory, for this process's life); this covers
// the ones that come back later, after a restart of this site too. It
// returns how many offsets it moved.
func (b *Bundle) clampConsumerOffsets(ctx context.Context, ends map[string]int64) (int, error) {
	reg := b.Registry
	groups, err := reg.Groups(ctx)
	if err != nil {
		return 0, err
	}
	brokerID := b.Config().System.BrokerID
	moved := 0
	for _, g := range groups {
		offs, err := reg.ConsumerOffsets(ctx, g, "")
		if err != nil {
			return moved, err
		}
		for _, o := range offs {
			end, ok := ends[georeplicator.PartKey(o.Topic, o.Part)]
			if o.BrokerID != brokerID || !ok || o.Offset <= end {
				continue
			}
			if err := reg.CommitOffset(ctx, g, o.Topic, o.BrokerID, o.Part, -1, end); err != nil {
				return moved, err
			}
			moved++
			b.log.Warn("FAILOVER: a consumer offset beyond what this site holds moved back to its end (the records it was read past were lost with the old master)",
				"group", g, "partition", fmt.Sprintf("%s-%d", o.Topic, o.Part), "from", o.Offset, "to", end)
		}
	}
	return moved, nil
}
