package topology

import (
	"context"
	"sort"
	"strings"
	"time"

	"metaq/georeplicator"
)

// Report is one slave group's replication lag, as `metaq lag`, /lag and the
// Prometheus collector show it.
type Report struct {
	// The master's summary of the group (slaveGroup, slaveId, partitions,
	// bytes, messages, behindNs, state in JSON).
	LagSummary
	// Site and Member are the slave's site and gossip name ("" when no slave
	// of that id is in the pool).
	Site     string `json:"site"`
	Member   string `json:"member,omitempty"`
	BrokerID int    `json:"brokerId"`
	// MasterSite is the site of the master that reports the figures.
	MasterSite string `json:"masterSite"`
	// SecondsBehind is LagSummary.Behind in seconds.
	SecondsBehind float64 `json:"secondsBehind"`
	// Detail is per partition, present only on the master's own bundle.
	Detail []georeplicator.PartitionLag `json:"detail,omitempty"`
}

// Reports returns the lag of every slave group in the pool, sorted by broker
// id and slave group. Figures come from the gossiped summary of each broker
// id's current master (CurrentMasters); on that master's own bundle they
// come fresh from its LagSource with partition detail. A group is down when
// its master says it is not connected, when the slave's bundle or the
// master's is down, or when no slave with its id is in the pool.
func (t *Topology) Reports() []Report {
	members := t.Members()
	var local []georeplicator.GroupLag
	if t.role() == RoleMaster && t.opts.Lag != nil {
		local = t.opts.Lag.Lag()
	}
	return buildReports(members, t.opts.Name, local, t.opts.LaggingAfter)
}

// role is what this bundle is now: the Mastership source's answer (a
// promotion or a demotion changes it), else the role it started with.
func (t *Topology) role() Role {
	if t.opts.Mastership != nil {
		return t.opts.Mastership.Mastership().Role
	}
	return t.opts.Role
}

// CurrentMasters picks, per broker id, the master whose figures stand (its
// slave groups' lag, its consumer groups): the one of the highest
// generation, a live one before a suspect one before a down one. After a
// failover the old master's last gossip (down, or not yet demoted) still
// lists the slave groups it had; those groups are gone, and listing them
// beside the new master's would show every group twice and the old ones as
// down.
func CurrentMasters(members []Member) map[int]Member {
	best := map[int]Member{}
	for _, m := range members {
		if m.Meta.Role != RoleMaster {
			continue
		}
		b, ok := best[m.Meta.BrokerID]
		if !ok || m.Meta.Generation > b.Meta.Generation ||
			m.Meta.Generation == b.Meta.Generation && m.State > b.State {
			best[m.Meta.BrokerID] = m
		}
	}
	return best
}

func buildReports(members []Member, localName string, local []georeplicator.GroupLag, laggingAfter time.Duration) []Report {
	type key struct{ broker, slave int }
	reporting := CurrentMasters(members)
	slaves := map[key]Member{}
	for _, m := range members {
		if m.Meta.Role != RoleSlave {
			continue
		}
		k := key{m.Meta.BrokerID, m.Meta.SlaveID}
		if old, ok := slaves[k]; !ok || old.State != StateAlive {
			slaves[k] = m
		}
	}
	var out []Report
	covered := map[key]bool{}
	for _, m := range members {
		if m.Meta.Role != RoleMaster || reporting[m.Meta.BrokerID].Name != m.Name {
			continue
		}
		summaries := m.Meta.Lag
		var detail map[string][]georeplicator.PartitionLag
		if m.Name == localName && local != nil {
			summaries = SummarizeLag(local, laggingAfter)
			detail = map[string][]georeplicator.PartitionLag{}
			for _, g := range local {
				detail[g.Group] = g.Partitions
			}
		}
		for _, s := range summaries {
			k := key{m.Meta.BrokerID, s.SlaveID}
			r := Report{LagSummary: s, BrokerID: m.Meta.BrokerID, MasterSite: m.Meta.Site,
				SecondsBehind: s.Behind.Seconds(), Detail: detail[s.SlaveGroup]}
			sl, ok := slaves[k]
			if ok {
				r.Site, r.Member = sl.Meta.Site, sl.Name
			}
			if !ok || sl.State == StateDown || m.State == StateDown {
				r.State = LagDown
			}
			covered[k] = true
			out = append(out, r)
		}
	}
	// Slaves whose master reports nothing for them (not connected yet, or
	// the master is not in the pool).
	for k, sl := range slaves {
		if covered[k] {
			continue
		}
		out = append(out, Report{LagSummary: LagSummary{SlaveID: k.slave, State: LagDown},
			Site: sl.Meta.Site, Member: sl.Name, BrokerID: k.broker})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		if a.SlaveGroup != b.SlaveGroup {
			return a.SlaveGroup < b.SlaveGroup
		}
		return a.SlaveID < b.SlaveID
	})
	return out
}

// ViewRootPrefix is how site view roots are named: /meta-view-<site>
// (registry.SiteViewRoot; repeated here because topology does not import
// the registry).
const ViewRootPrefix = "/meta-view-"

// ConsumerLagReport is one consumer group's backlog on one topic, as read
// through one ZooKeeper root.
type ConsumerLagReport struct {
	// Site is the site whose consumers the group's offsets belong to: the
	// site of the view root it uses, or of the ZooKeeper its real root was
	// read from; "" when unknown.
	Site       string `json:"site"`
	Root       string `json:"root"`
	Group      string `json:"group"`
	Topic      string `json:"topic"`
	BrokerID   int    `json:"brokerId"`
	Partitions int    `json:"partitions"`
	// Bytes is the sum over partitions of master end offset minus the
	// group's committed offset (never negative).
	Bytes int64 `json:"bytes"`
}

// ConsumerLag computes consumer-group backlog per root (real root and site
// views) for the partitions whose master end offsets this bundle knows: those
// of its own broker id when it is the master, from the LagSource. Offsets come
// from src. Partitions without an end offset are left out.
func (t *Topology) ConsumerLag(ctx context.Context, src OffsetSource) ([]ConsumerLagReport, error) {
	if src == nil || t.role() != RoleMaster || t.opts.Lag == nil {
		return nil, nil
	}
	offs, err := src.ConsumerOffsets(ctx)
	if err != nil {
		return nil, err
	}
	return consumerLag(t.opts.BrokerID, EndOffsets(t.opts.Lag.Lag()), offs), nil
}

// TopicPartition names one partition of one broker id.
type TopicPartition struct {
	Topic     string
	Partition int
}

// EndOffsets takes each partition's master end offset from lag figures (the
// largest seen over slave groups).
func EndOffsets(groups []georeplicator.GroupLag) map[TopicPartition]int64 {
	out := map[TopicPartition]int64{}
	for _, g := range groups {
		for _, p := range g.Partitions {
			k := TopicPartition{p.Topic, p.Partition}
			out[k] = max(out[k], p.MasterEnd)
		}
	}
	return out
}

func consumerLag(brokerID int, ends map[TopicPartition]int64, offs []ConsumerOffset) []ConsumerLagReport {
	type key struct{ site, root, group, topic string }
	agg := map[key]*ConsumerLagReport{}
	for _, o := range offs {
		if o.BrokerID != brokerID {
			continue
		}
		end, ok := ends[TopicPartition{o.Topic, o.Partition}]
		if !ok {
			continue
		}
		k := key{o.Site, o.Root, o.Group, o.Topic}
		r := agg[k]
		if r == nil {
			r = &ConsumerLagReport{Root: o.Root, Site: o.Site, Group: o.Group, Topic: o.Topic, BrokerID: brokerID}
			if r.Site == "" && strings.HasPrefix(o.Root, ViewRootPrefix) {
				r.Site = strings.TrimPrefix(o.Root, ViewRootPrefix)
			}
			agg[k] = r
		}
		r.Partitions++
		r.Bytes += max(0, end-o.Offset)
	}
	out := make([]ConsumerLagReport, 0, len(agg))
	for _, r := range agg {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Root != b.Root {
			return a.Root < b.Root
		}
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		return a.Topic < b.Topic
	})
	return out
}
