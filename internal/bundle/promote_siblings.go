package bundle

import (
	"errors"

	"metaq/internal/siterole"
)

// ErrSiblingAhead refuses a promotion while another slave site of the
// brokerId holds more of the old master's log than this one, or may (it
// still says it follows the master): records of a synchronous topic that
// only it holds were acknowledged, and it would cut them when it follows
// this site. Promote that site, or use force.
var ErrSiblingAhead = errors.New("another slave site holds more of the master's log than this site")

// siblingAhead returns why this site, having applied the old master's log
// up to applied, is not the one to promote: an alive slave site of the same
// brokerId that gossips a higher position after losing the master, or one
// that still gossips it follows the master (its position is not final
// yet). "" when none does, and without gossip (nothing is known).
func (b *Bundle) siblingAhead(applied int64) string {
	tc := compOf[*topologyComponent](b)
	if tc == nil || tc.Topology() == nil {
		return ""
	}
	return siterole.SiblingAhead(b.Config().Site.Name, applied, gossipPeers(tc.Topology(), b.Config().System.BrokerID))
}
