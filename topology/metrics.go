package topology

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports lag reports to Prometheus at scrape time (no background
// sampling): replication lag per slave group, consumer-group lag per site
// root, and gossip membership. Register it on the dashboard's registry.
type Collector struct {
	t       *Topology
	offsets OffsetSource

	replBytes, replMsgs, replSecs, replParts, replState *prometheus.Desc
	consBytes                                           *prometheus.Desc
	siteUp, members                                     *prometheus.Desc
}

// NewCollector returns a Collector over t; offsets may be nil (no consumer
// lag series).
func NewCollector(t *Topology, offsets OffsetSource) *Collector {
	repl := []string{"broker_id", "slave_group", "site"}
	return &Collector{
		t: t, offsets: offsets,
		replBytes: prometheus.NewDesc("metaq_replication_lag_bytes", "Bytes the slave group is behind its master.", repl, nil),
		replMsgs:  prometheus.NewDesc("metaq_replication_lag_messages", "Messages the slave group is behind its master.", repl, nil),
		replSecs:  prometheus.NewDesc("metaq_replication_lag_seconds", "Age of the oldest record not yet on the slave group.", repl, nil),
		replParts: prometheus.NewDesc("metaq_replication_partitions", "Partitions replicated to the slave group.", repl, nil),
		replState: prometheus.NewDesc("metaq_replication_state", "1 for the slave group's current state (ok, lagging, stuck, down).",
			append(repl, "state"), nil),
		consBytes: prometheus.NewDesc("metaq_consumer_lag_bytes", "Bytes between the master end and the consumer group's committed offsets.",
			[]string{"site", "root", "group", "topic", "broker_id"}, nil),
		siteUp:  prometheus.NewDesc("metaq_site_up", "1 while any bundle of the site is alive in gossip.", []string{"site"}, nil),
		members: prometheus.NewDesc("metaq_gossip_members", "Gossip members by state.", []string{"state"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.replBytes, c.replMsgs, c.replSecs, c.replParts, c.replState, c.consBytes, c.siteUp, c.members} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. Reading consumer offsets is
// bounded by a 5 s timeout; on error those series are left out.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.t.Reports() {
		lv := []string{strconv.Itoa(r.BrokerID), r.SlaveGroup, r.Site}
		ch <- prometheus.MustNewConstMetric(c.replBytes, prometheus.GaugeValue, float64(r.Bytes), lv...)
		ch <- prometheus.MustNewConstMetric(c.replMsgs, prometheus.GaugeValue, float64(r.Messages), lv...)
		ch <- prometheus.MustNewConstMetric(c.replSecs, prometheus.GaugeValue, r.SecondsBehind, lv...)
		ch <- prometheus.MustNewConstMetric(c.replParts, prometheus.GaugeValue, float64(r.Partitions), lv...)
		for _, s := range []LagState{LagOK, LagLagging, LagStuck, LagDown} {
			v := 0.0
			if r.State == s {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.replState, prometheus.GaugeValue, v, append(lv, s.String())...)
		}
	}
	if c.offsets != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl, err := c.t.ConsumerLag(ctx, c.offsets)
		if err == nil {
			for _, r := range cl {
				ch <- prometheus.MustNewConstMetric(c.consBytes, prometheus.GaugeValue, float64(r.Bytes),
					r.Site, r.Root, r.Group, r.Topic, strconv.Itoa(r.BrokerID))
			}
		} else {
			c.t.log.Warn("TOPOLOGY: consumer offsets for metrics", "err", err)
		}
	}
	for s, st := range c.t.Sites() {
		v := 0.0
		if st == StateAlive {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.siteUp, prometheus.GaugeValue, v, s)
	}
	counts := map[MemberState]int{}
	for _, m := range c.t.Members() {
		counts[m.State]++
	}
	for _, s := range []MemberState{StateAlive, StateSuspect, StateDown} {
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(counts[s]), s.String())
	}
}
