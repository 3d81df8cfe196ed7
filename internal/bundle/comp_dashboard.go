package bundle

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"metaq/internal/dashboard"
	"metaq/topology"
)

// dashboardComponent serves the dashboard, its JSON API, /lag and the
// Prometheus /metrics on [site] dashboardAddr (default
// 127.0.0.1:<dashboardHttpPort>; any other address needs [site] token).
// It runs when dashboardHttpPort or dashboardAddr is written in the
// configuration.
type dashboardComponent struct {
	mu   sync.Mutex
	b    *Bundle
	srv  *dashboard.Server
	reg  *prometheus.Registry
	topo *topology.Topology
}

func newDashboardComponent() *dashboardComponent { return &dashboardComponent{} }

func (c *dashboardComponent) Name() string { return compDashboard }

func (c *dashboardComponent) Start(_ context.Context, b *Bundle) error {
	cfg := b.Config()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBundleCollector(b))
	sample := time.Duration(0)
	if cfg.Gossip.ProbeInterval > 0 && cfg.Gossip.ProbeInterval < time.Second {
		sample = time.Second // short gossip intervals: a demo or a test; chart them densely
	}
	srv, err := dashboard.New(dashboard.Options{
		Addr:        cfg.Site.DashboardAddr,
		Token:       cfg.Site.Token,
		Source:      dashboard.SourceFunc(func(ctx context.Context) dashboard.Snapshot { return snapshot(ctx, b) }),
		Registry:    reg,
		SampleEvery: sample,
		Extra: map[string]http.Handler{
			"GET /lag": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc, ok := findComp[*topologyComponent](b); ok {
					if h := tc.LagHandler(); h != nil {
						h.ServeHTTP(w, r)
						return
					}
				}
				http.Error(w, "lag: gossip is not configured on this bundle ([gossip])", http.StatusServiceUnavailable)
			}),
		},
		Logger: b.Logger(),
	})
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return err
	}
	c.mu.Lock()
	c.b, c.srv, c.reg = b, srv, reg
	c.mu.Unlock()
	return nil
}

// attachTopology adds the lag and gossip series once topology runs.
func (c *dashboardComponent) attachTopology(t *topology.Topology, offsets topology.OffsetSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reg == nil || c.topo != nil {
		return
	}
	c.topo = t
	if err := c.reg.Register(topology.NewCollector(t, offsets)); err != nil && c.b != nil {
		c.b.Logger().Warn("DASHBOARD: topology metrics not registered", "err", err)
	}
}

// Addr is the dashboard's listen address ("" when not running).
func (c *dashboardComponent) Addr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return ""
	}
	return c.srv.Addr().String()
}

// URL is the dashboard's address as a browser on this machine opens it.
func (c *dashboardComponent) URL() string {
	a := c.Addr()
	if a == "" {
		return ""
	}
	return "http://" + a + "/"
}

func (c *dashboardComponent) Close() error {
	c.mu.Lock()
	srv := c.srv
	c.srv = nil
	c.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Status gives the dashboard's address.
func (c *dashboardComponent) Status() any { return map[string]any{"addr": c.Addr()} }

// snapshot builds the dashboard's view of the bundle from the store, the
// broker's counters, replication, gossip and configsync.
func snapshot(ctx context.Context, b *Bundle) dashboard.Snapshot {
	cfg := b.Config()
	s := dashboard.Snapshot{
		Site:     cfg.Site.Name,
		Role:     "master",
		BrokerID: cfg.System.BrokerID,
		ServeURL: b.Broker.URL(),
		Time:     time.Now(),
		Extra:    map[string]any{},
	}
	sl := b.SlaveConfig()
	if sl != nil {
		s.Role = "slave"
	}
	s.Gateway = gatewayReport(b)
	health := func(name string, err error) {
		h := dashboard.HealthItem{Name: name, OK: err == nil}
		if err != nil {
			h.Err = err.Error()
		}
		s.Health = append(s.Health, h)
	}
	health("broker", b.Broker.Health())
	health("storage", b.Store.Degraded())

	// Topics and partitions, from the store.
	byTopic := map[string][]dashboard.Partition{}
	keep := map[msgKey]bool{}
	for _, p := range b.Store.Partitions() {
		// Messages held (counted from the log), not the store's count since
		// start-up: a restarted slave holds what it replicated before.
		msgs, complete := b.msgs.count(b.Store, p)
		if !complete {
			msgs = max(msgs, p.Messages)
		}
		keep[msgKey{p.Topic, p.Partition}] = true
		byTopic[p.Topic] = append(byTopic[p.Topic], dashboard.Partition{Partition: p.Partition, Min: p.Min, Max: p.Max, Bytes: p.Bytes, Messages: msgs})
	}
	b.msgs.forget(keep)
	names := make([]string, 0, len(byTopic))
	for n := range byTopic {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ps := byTopic[n]
		sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
		s.Topics = append(s.Topics, dashboard.Topic{Name: n, Partitions: ps})
	}

	// Producers and consumers: the broker counts commands, not clients; the
	// consumer groups come from ZooKeeper when it is on.
	st := brokerStats(b)
	s.Extra["connections"] = st["curr_connections"]
	s.Producers = append(s.Producers, dashboard.Client{Name: "puts (all connections)", Count: st["cmd_put"]})
	s.Consumers = append(s.Consumers, dashboard.Client{Name: "gets (all connections)", Count: st["cmd_get"]})
	if b.Registry != nil {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if groups, err := b.Registry.Groups(gctx); err == nil {
			for _, g := range groups {
				s.Consumers = append(s.Consumers, dashboard.Client{Name: g})
			}
		}
		cancel()
	}

	// Replication lag: the pool's report when gossip runs, else the local view.
	var topo *topology.Topology
	if tc, ok := findComp[*topologyComponent](b); ok {
		topo = tc.Topology()
	}
	if topo != nil {
		s.Lag = topo.Reports()
		for _, m := range topo.Members() {
			s.Sites = append(s.Sites, dashboard.Site{Name: m.Meta.Site, Role: m.Meta.Role.String(), Addr: m.Meta.ServeURL,
				State: map[topology.MemberState]string{topology.StateAlive: "up", topology.StateSuspect: "suspect", topology.StateDown: "down"}[m.State]})
		}
		health("gossip", nil)
	} else if sc, ok := findComp[*shipperComponent](b); ok && sc.Shipper() != nil {
		for _, sum := range topology.SummarizeLag(sc.Shipper().Lag(), topology.DefaultLaggingAfter) {
			s.Lag = append(s.Lag, topology.Report{LagSummary: sum, BrokerID: cfg.System.BrokerID, MasterSite: cfg.Site.Name,
				SecondsBehind: sum.Behind.Seconds()})
		}
	}
	if rc, ok := findComp[*receiverComponent](b); ok {
		if r := rc.Receiver(); r != nil {
			rs := r.Status()
			var err error
			switch {
			case !rs.Connected:
				err = errString("not connected to the master: " + rs.LastError)
			case len(rs.Diverged) > 0:
				err = errString(fmt.Sprintf("%d partition(s) diverged, not replicated: %s", len(rs.Diverged), strings.Join(rs.Diverged, "; ")))
			}
			health("replication", err)
			if topo == nil {
				state := topology.LagOK
				if !rs.Connected {
					state = topology.LagDown
				}
				s.Lag = append(s.Lag, topology.Report{LagSummary: topology.LagSummary{SlaveGroup: sl.SlaveGroup,
					SlaveID: sl.SlaveID, Bytes: max(0, rs.MasterPos-rs.AppliedPos), State: state},
					Site: cfg.Site.Name, BrokerID: cfg.System.BrokerID})
			}
		} else if method, _ := rc.Method(); method == methodMetaQ {
			var err error
			if !rc.Connected() {
				err = errString("not connected to the master (MetaQ method)")
			}
			health("replication", err)
		}
	}
	if cc, ok := findComp[*configSyncComponent](b); ok {
		if a := cc.Agent(); a != nil {
			as := a.State()
			s.Config = dashboard.ConfigInfo{Version: as.Version, SHA256: as.SHA256, PendingRestart: len(as.PendingRestart) > 0}
			var err error
			if as.Error != "" {
				err = errString(as.Error)
			}
			health("configsync", err)
		}
	}
	s.Extra["configChecksum"] = cfg.Checksum // MetaQ's CRC32 of server.ini, as in master_config_checksum
	return s
}

type errString string

func (e errString) Error() string { return string(e) }

// brokerStats parses the broker's system stats ("name value" lines).
func brokerStats(b *Bundle) map[string]int64 {
	out := map[string]int64{}
	for _, l := range strings.Split(b.Broker.Stats(""), "\r\n") {
		k, v, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// bundleCollector exports the broker, replication and configsync series at
// scrape time; lag and gossip series come from topology's collector.
type bundleCollector struct {
	b                                          *Bundle
	up, conns, puts, gets, putFailed, getMiss  *prometheus.Desc
	partBytes, partMsgs, partMax               *prometheus.Desc
	damagedBytes, damagedRanges                *prometheus.Desc
	scrubBytes, scrubPasses, scrubDamaged      *prometheus.Desc
	scrubUnchecked, getsSent                   *prometheus.Desc
	idxPendSegs, idxPendEntries                *prometheus.Desc
	shipConnected, shipBytes, shipMsgs         *prometheus.Desc
	shipSecs, shipWire, shipRaw                *prometheus.Desc
	recvConnected, recvApplied, recvMaster     *prometheus.Desc
	recvWire, recvRaw, recvReconnects          *prometheus.Desc
	recvDiverged                               *prometheus.Desc
	cfgVersion, cfgPending, cfgError           *prometheus.Desc
	connRefused, connClosed                    *prometheus.Desc
	buffered, bufferedPeak, bufferedLimit      *prometheus.Desc
	gwPuts, gwDials, gwInFlight, gwInFlightMax *prometheus.Desc
	obEntries, obBytes, obAge, obMaxBytes      *prometheus.Desc
	obMaxAge                                   *prometheus.Desc
}

func newBundleCollector(b *Bundle) *bundleCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &bundleCollector{
		b:              b,
		up:             d("metaq_broker_up", "1 while the broker serves and its store accepts appends."),
		conns:          d("metaq_broker_connections", "Open client connections."),
		puts:           d("metaq_broker_put_total", "put commands served."),
		gets:           d("metaq_broker_get_total", "get commands served."),
		putFailed:      d("metaq_broker_put_failed_total", "put commands that failed."),
		getMiss:        d("metaq_broker_get_miss_total", "get commands that found no message."),
		partBytes:      d("metaq_partition_bytes", "Retained bytes of a partition.", "topic", "partition"),
		partMsgs:       d("metaq_partition_messages", "Messages appended to a partition since start.", "topic", "partition"),
		partMax:        d("metaq_partition_max_offset", "Readable end offset of a partition.", "topic", "partition"),
		damagedBytes:   d("metaq_store_damaged_bytes", "Bytes of a partition's records lost to disk damage (not served, not repaired).", "topic", "partition"),
		damagedRanges:  d("metaq_store_damaged_ranges", "Damaged ranges in the store; above 0 the store is degraded."),
		scrubBytes:     d("metaq_store_scrub_bytes_total", "Log bytes the background scrub checked since start."),
		scrubPasses:    d("metaq_store_scrub_passes_total", "Full scrub passes over the sealed segments since start."),
		scrubDamaged:   d("metaq_store_scrub_damaged_total", "Damaged log ranges the scrub found (quarantined, listed for repair)."),
		scrubUnchecked: d("metaq_store_scrub_unchecked_bytes", "Log bytes older than start-up no scrub pass has checked yet (their gets are copied and checked)."),
		idxPendSegs:    d("metaq_store_index_pending_segments", "Sealed log segments whose index is held in memory because the disk had no room to write it (written once there is room)."),
		idxPendEntries: d("metaq_store_index_pending_entries", "Index entries held in memory for those segments."),
		getsSent:       d("metaq_broker_get_sendfile_total", "get answers sent from the log files with sendfile, not copied."),
		shipConnected:  d("metaq_replication_slave_connected", "1 while the slave is connected to this master.", "slave_group", "slave_id"),
		shipBytes:      d("metaq_replication_master_lag_bytes", "Bytes the slave is behind, as this master measures.", "slave_group", "slave_id"),
		shipMsgs:       d("metaq_replication_master_lag_messages", "Messages the slave is behind, as this master measures.", "slave_group", "slave_id"),
		shipSecs:       d("metaq_replication_master_lag_seconds", "Age of the oldest record not yet on the slave.", "slave_group", "slave_id"),
		shipWire:       d("metaq_replication_wire_bytes_total", "Bytes sent on the replication link, headers included.", "slave_group", "slave_id"),
		shipRaw:        d("metaq_replication_raw_bytes_total", "Payload bytes shipped before compression.", "slave_group", "slave_id"),
		recvConnected:  d("metaq_replication_connected", "1 while this slave is connected to its master."),
		recvApplied:    d("metaq_replication_applied_position", "Master log position applied on this slave."),
		recvMaster:     d("metaq_replication_master_position", "Master's durable log end as last reported."),
		recvWire:       d("metaq_replication_received_wire_bytes_total", "Bytes received on the replication link."),
		recvRaw:        d("metaq_replication_received_raw_bytes_total", "Payload bytes received after decompression."),
		recvReconnects: d("metaq_replication_reconnects_total", "Reconnects to the master."),
		recvDiverged:   d("metaq_replication_diverged_partitions", "Partitions this slave stopped replicating because its bytes differ from the master's."),
		cfgVersion:     d("metaq_configsync_version", "server.ini version this site runs (0 = not from configsync)."),
		cfgPending:     d("metaq_configsync_pending_restart", "Keys of the running server.ini that wait for a restart."),
		cfgError:       d("metaq_configsync_apply_failed", "1 when the last pushed version failed to apply here."),
		connRefused:    d("metaq_broker_connections_refused_total", "Connections refused by a [limits] bound.", "limit"),
		connClosed:     d("metaq_broker_connections_closed_total", "Connections the broker closed to bound its resources.", "reason"),
		buffered:       d("metaq_broker_buffered_bytes", "Bytes of get answers not yet written and put bodies not yet stored."),
		bufferedPeak:   d("metaq_broker_buffered_bytes_peak", "The most buffered bytes held at once since start."),
		bufferedLimit:  d("metaq_broker_buffered_bytes_limit", "[limits] maxBufferedBytes."),
		gwPuts: d("metaq_gateway_puts_total", "Puts the write gateway handled, by outcome: forwarded (the master's answer), not_sent (503), unknown (500), "+
			"retried (sent again, the master moved), accepted (accepted-locally, in the outbox), refused (by the outbox), drained (outbox entries the master confirmed), "+
			"deduplicated (outbox entries found at the master, not sent again), full (503: no room under [site] forwardMaxInFlightBytes in time).", "outcome"),
		gwInFlight:    d("metaq_gateway_inflight_bytes", "Bodies of forwarded puts awaiting the master's answers, all producer connections together."),
		gwInFlightMax: d("metaq_gateway_inflight_max_bytes", "[site] forwardMaxInFlightBytes."),
		gwDials:       d("metaq_gateway_dials_total", "Connections the write gateway opened to the master."),
		obEntries:     d("metaq_gateway_outbox_entries", "Puts in the store-and-forward outbox, not yet confirmed by the master."),
		obBytes:       d("metaq_gateway_outbox_bytes", "Bytes of the outbox's entries."),
		obAge:         d("metaq_gateway_outbox_oldest_age_seconds", "Age of the outbox's oldest entry (0 when empty)."),
		obMaxBytes:    d("metaq_gateway_outbox_max_bytes", "[site] outboxMaxBytes."),
		obMaxAge:      d("metaq_gateway_outbox_max_age_seconds", "[site] outboxMaxAgeMs, in seconds."),
	}
}

func (c *bundleCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.conns, c.puts, c.gets, c.putFailed, c.getMiss, c.partBytes, c.partMsgs, c.partMax, c.damagedBytes, c.damagedRanges,
		c.scrubBytes, c.scrubPasses, c.scrubDamaged, c.scrubUnchecked, c.getsSent, c.idxPendSegs, c.idxPendEntries,
		c.shipConnected, c.shipBytes, c.shipMsgs, c.shipSecs, c.shipWire, c.shipRaw,
		c.recvConnected, c.recvApplied, c.recvMaster, c.recvWire, c.recvRaw, c.recvReconnects, c.recvDiverged,
		c.cfgVersion, c.cfgPending, c.cfgError, c.connRefused, c.connClosed, c.buffered, c.bufferedPeak, c.bufferedLimit,
		c.gwPuts, c.gwDials, c.gwInFlight, c.gwInFlightMax, c.obEntries, c.obBytes, c.obAge, c.obMaxBytes, c.obMaxAge} {
		ch <- d
	}
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func (c *bundleCollector) Collect(ch chan<- prometheus.Metric) {
	b := c.b
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	ct := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	g(c.up, b2f(b.Broker.Health() == nil))
	st := brokerStats(b)
	g(c.conns, float64(st["curr_connections"]))
	ct(c.puts, float64(st["cmd_put"]))
	ct(c.gets, float64(st["cmd_get"]))
	ct(c.putFailed, float64(st["put_failed"]))
	ct(c.getMiss, float64(st["get_miss"]))
	res := b.Broker.Resources()
	ct(c.connRefused, float64(res.RefusedMaxConnections), "maxConnections")
	ct(c.connRefused, float64(res.RefusedPerAddress), "maxConnectionsPerAddress")
	ct(c.connClosed, float64(res.ClosedIdle), "idle")
	ct(c.connClosed, float64(res.ClosedReadTimeout), "read_timeout")
	ct(c.connClosed, float64(res.ClosedStalled), "stalled")
	ct(c.connClosed, float64(res.ClosedSilentBody), "silent_body")
	g(c.buffered, float64(res.BufferedBytes))
	g(c.bufferedPeak, float64(res.BufferedBytesPeak))
	g(c.bufferedLimit, float64(res.MaxBufferedBytes))
	if gw := gatewayReport(b); gw != nil {
		for _, o := range []struct {
			outcome string
			n       int64
		}{{"forwarded", gw.Forwarded}, {"not_sent", gw.NotSent}, {"unknown", gw.Unknown}, {"retried", gw.Retried},
			{"accepted", gw.Accepted}, {"refused", gw.Refused}, {"drained", gw.Drained}, {"deduplicated", gw.Deduplicated},
			{"full", gw.Full}} {
			ct(c.gwPuts, float64(o.n), o.outcome)
		}
		g(c.gwInFlight, float64(gw.InFlightBytes))
		g(c.gwInFlightMax, float64(gw.MaxInFlightBytes))
		ct(c.gwDials, float64(gw.Dials))
		if ob := gw.Outbox; ob != nil {
			g(c.obEntries, float64(ob.Entries))
			g(c.obBytes, float64(ob.Bytes))
			g(c.obAge, ob.OldestAgeSeconds)
			g(c.obMaxBytes, float64(ob.MaxBytes))
			g(c.obMaxAge, ob.MaxAgeSeconds)
		}
	}
	ct(c.getsSent, float64(res.GetsSent))
	sc := b.Store.Scrub()
	ct(c.scrubBytes, float64(sc.Bytes))
	ct(c.scrubPasses, float64(sc.Passes))
	ct(c.scrubDamaged, float64(sc.Damaged))
	g(c.scrubUnchecked, float64(sc.Unchecked))
	idxSegs, idxEntries := 0, int64(0)
	if p := b.Store.IndexPending(); p != nil {
		idxSegs, idxEntries = p.Segments, p.Entries
	}
	g(c.idxPendSegs, float64(idxSegs))
	g(c.idxPendEntries, float64(idxEntries))
	for _, p := range b.Store.Partitions() {
		part := strconv.Itoa(p.Partition)
		g(c.partBytes, float64(p.Bytes), p.Topic, part)
		g(c.partMsgs, float64(p.Messages), p.Topic, part)
		g(c.partMax, float64(p.Max), p.Topic, part)
	}
	dmg := b.Store.Damaged()
	g(c.damagedRanges, float64(len(dmg)))
	byPart := map[[2]string]int64{}
	for _, d := range dmg {
		byPart[[2]string{d.Topic, strconv.Itoa(d.Partition)}] += d.To - d.From
	}
	for k, n := range byPart {
		g(c.damagedBytes, float64(n), k[0], k[1])
	}
	if sc, ok := findComp[*shipperComponent](b); ok {
		if s := sc.Shipper(); s != nil {
			for _, l := range s.Lag() {
				id := strconv.Itoa(l.SlaveID)
				g(c.shipConnected, b2f(l.Connected), l.Group, id)
				g(c.shipBytes, float64(l.Bytes), l.Group, id)
				g(c.shipMsgs, float64(l.Messages), l.Group, id)
				g(c.shipSecs, l.Behind.Seconds(), l.Group, id)
				ct(c.shipWire, float64(l.WireBytes), l.Group, id)
				ct(c.shipRaw, float64(l.RawBytes), l.Group, id)
			}
		}
	}
	if rc, ok := findComp[*receiverComponent](b); ok {
		if r := rc.Receiver(); r != nil {
			rs := r.Status()
			g(c.recvConnected, b2f(rs.Connected))
			g(c.recvApplied, float64(rs.AppliedPos))
			g(c.recvMaster, float64(rs.MasterPos))
			ct(c.recvWire, float64(rs.WireBytes))
			ct(c.recvRaw, float64(rs.RawBytes))
			ct(c.recvReconnects, float64(rs.Reconnects))
			g(c.recvDiverged, float64(len(rs.Diverged)))
		}
	}
	if cc, ok := findComp[*configSyncComponent](b); ok {
		if a := cc.Agent(); a != nil {
			as := a.State()
			g(c.cfgVersion, float64(as.Version))
			g(c.cfgPending, float64(len(as.PendingRestart)))
			g(c.cfgError, b2f(as.Error != ""))
		}
	}
}
