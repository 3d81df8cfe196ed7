package broker

// Synchronous cross-site replication per topic. A topic whose section sets
// minSyncSites=N has its puts acknowledged only once their records are
// durable here (the group commit) and fsynced at N slave sites (distinct
// slave groups of the cross-site replication, a SiteReplicator). It is a
// decorator on the put route's store step (siteSyncStore, in front of the
// store or of the samsa syncMaster), like the syncMaster in front of the
// store: other topics pass through it with one topic lookup.
//
// With fewer than N slave sites connected, a put is refused at validation
// (checkPut) with 503 and a Detail saying how many are connected, which a
// client may retry, unless the topic says syncDegrade=async: then it is
// stored and acknowledged without waiting, the transition is logged at WARN
// once (and its end at INFO), and `stats sync_sites` shows the topic
// degraded with the puts acknowledged that way. A put that passed the check
// but whose sites do not fsync it within Options.SiteSyncTimeout (a site
// was lost meanwhile) is answered as failed although stored here (the
// client retries: at least once, as with samsa), or with syncDegrade=async
// acknowledged and counted as degraded; the first such timeout is logged
// at WARN, the recovery at INFO.

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/broker/wire"
)

// SiteReplicator is the cross-site replication master as the put route
// sees it (the georeplicator's Shipper implements it).
type SiteReplicator interface {
	// ConnectedSites is the number of slave sites (distinct slave groups)
	// with a slave connected now.
	ConnectedSites() int
	// AwaitDurable calls done once n slave sites have fsynced the log up to
	// its durable end as of the call, or with an error after timeout. done
	// runs exactly once, possibly before AwaitDurable returns, and must not
	// block.
	AwaitDurable(n int, timeout time.Duration, done func(error))
}

type siteRepHolder struct{ r SiteReplicator }

// SetSiteReplicator gives the put route the cross-site replication master
// that topics with minSyncSites wait for; nil removes it (their puts are
// then refused, or degraded, as with no slave site connected).
func (b *Broker) SetSiteReplicator(r SiteReplicator) {
	if r == nil {
		b.siteRep.Store(nil)
		return
	}
	b.siteRep.Store(&siteRepHolder{r})
}

func (b *Broker) siteReplicator() SiteReplicator {
	if h := b.siteRep.Load(); h != nil {
		return h.r
	}
	return nil
}

// connectedSites is the slave sites connected now (0 without a replicator).
func (b *Broker) connectedSites() int {
	if r := b.siteReplicator(); r != nil {
		return r.ConnectedSites()
	}
	return 0
}

// SyncTopicStatus is one topic's synchronous replication, for status pages.
type SyncTopicStatus struct {
	Topic        string
	MinSyncSites int
	Degrade      string // config.SyncDegradeRefuse or config.SyncDegradeAsync
	Degraded     bool   // acknowledging without its sites (syncDegrade=async)
	DegradedPuts int64  // puts acknowledged while degraded
	RefusedPuts  int64  // puts refused for too few connected sites
	FailedPuts   int64  // puts whose sites did not fsync them in time
}

// siteSyncStats is the per-topic state behind SyncTopicStatus.
type siteSyncStats struct {
	mu     sync.Mutex
	topics map[string]*siteSyncTopic
}

type siteSyncTopic struct {
	degraded                  bool
	degradedPuts, refusedPuts atomic.Int64
	failedPuts                atomic.Int64
	timingOut                 atomic.Bool // the last wait timed out: the next one logs at INFO when it ends in time
}

func (s *siteSyncStats) topic(name string) *siteSyncTopic {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics == nil {
		s.topics = map[string]*siteSyncTopic{}
	}
	t := s.topics[name]
	if t == nil {
		t = &siteSyncTopic{}
		s.topics[name] = t
	}
	return t
}

// setDegraded records whether topic acknowledges without its sites and
// logs a change once.
func (b *Broker) setDegraded(topic string, tc *config.Topic, degraded bool, connected int) {
	t := b.siteStats.topic(topic)
	b.siteStats.mu.Lock()
	changed := t.degraded != degraded
	t.degraded = degraded
	b.siteStats.mu.Unlock()
	switch {
	case changed && degraded:
		b.log.Warn("TOPIC("+topic+"): too few slave sites connected; acknowledging puts asynchronously (syncDegrade=async)",
			"minSyncSites", tc.MinSyncSites, "connectedSites", connected)
	case changed:
		b.log.Info("TOPIC("+topic+"): slave sites back; puts wait for them again", "minSyncSites", tc.MinSyncSites, "connectedSites", connected)
	}
}

// SyncTopics reports every topic seen with minSyncSites, sorted by name.
func (b *Broker) SyncTopics() []SyncTopicStatus {
	b.siteStats.mu.Lock()
	names := make([]string, 0, len(b.siteStats.topics))
	for n := range b.siteStats.topics {
		names = append(names, n)
	}
	b.siteStats.mu.Unlock()
	slices.Sort(names)
	out := make([]SyncTopicStatus, 0, len(names))
	for _, n := range names {
		t := b.siteStats.topic(n)
		tc, _ := b.topicFor(n)
		b.siteStats.mu.Lock()
		degraded := t.degraded
		b.siteStats.mu.Unlock()
		out = append(out, SyncTopicStatus{Topic: n, MinSyncSites: tc.MinSyncSites, Degrade: tc.SyncDegrade, Degraded: degraded,
			DegradedPuts: t.degradedPuts.Load(), RefusedPuts: t.refusedPuts.Load(), FailedPuts: t.failedPuts.Load()})
	}
	return out
}

// syncSitesStats writes `stats sync_sites`: the connected slave sites, then
// one line per synchronous topic.
func (b *Broker) syncSitesStats(w *lineWriter) {
	w.line("connected_sites", strconv.Itoa(b.connectedSites()))
	for _, t := range b.SyncTopics() {
		w.line(t.Topic, "min_sync_sites", strconv.Itoa(t.MinSyncSites), "degrade", t.Degrade,
			"degraded", strconv.FormatBool(t.Degraded), "degraded_puts", strconv.FormatInt(t.DegradedPuts, 10),
			"refused_puts", strconv.FormatInt(t.RefusedPuts, 10), "failed_puts", strconv.FormatInt(t.FailedPuts, 10))
	}
}

// checkSyncSites is checkPut's step for synchronous topics: a client put to
// a topic with minSyncSites and too few slave sites connected is refused
// with 503 unless the topic degrades to asynchronous.
func (b *Broker) checkSyncSites(r *putReq, p int32, te *topicEntry) *wire.Result {
	n := te.tc.MinSyncSites
	if r.sync || n <= 0 || te.tc.SyncDegrade == config.SyncDegradeAsync {
		return nil
	}
	connected := b.connectedSites()
	if connected >= n || b.awaitingSites() {
		return nil
	}
	b.siteStats.topic(r.topic).refusedPuts.Add(1)
	detail := "topic " + r.topic + " is acknowledged at " + strconv.Itoa(n) + " slave sites (minSyncSites) and " +
		strconv.Itoa(connected) + " are connected; retry later"
	return wire.NewResult(wire.StatusServiceUnavailable, b.putError(r.topic, p, detail), r.opaque)
}

// siteSyncStore is the put route's store step for topics with
// minSyncSites, in front of next (see the top of this file).
type siteSyncStore struct {
	b    *Broker
	next batchStore
}

func (s siteSyncStore) storeBatch(ctx context.Context, topic string, partition int, msgs []store.Message, done func([]store.Appended, error)) {
	te := s.b.topicEntry(topic)
	if !te.ok || te.tc.MinSyncSites <= 0 {
		s.next.storeBatch(ctx, topic, partition, msgs, done)
		return
	}
	b, tc, n := s.b, &te.tc, te.tc.MinSyncSites
	rep := b.siteReplicator()
	connected := 0
	if rep != nil {
		connected = rep.ConnectedSites()
	}
	if connected < n && rep != nil && b.awaitingSites() {
		// A new master's slave sites are on their way (AwaitSitesFor).
		held := make([]store.Message, len(msgs))
		for i, m := range msgs {
			held[i] = m
			held[i].Body = append([]byte(nil), m.Body...)
		}
		if b.routines.Go(func() { s.awaitSites(ctx, topic, partition, held, done) }) {
			return
		}
	}
	if connected < n {
		if tc.SyncDegrade == config.SyncDegradeAsync {
			b.setDegraded(topic, tc, true, connected)
			b.siteStats.topic(topic).degradedPuts.Add(int64(len(msgs)))
			s.next.storeBatch(ctx, topic, partition, msgs, done)
			return
		}
		// Validation let it through (a transaction's commit, or the
		// sites left since): refuse it before it is stored.
		b.siteStats.topic(topic).refusedPuts.Add(int64(len(msgs)))
		done(nil, &slaveError{text: b.putError(topic, int32(partition), "topic "+topic+" is acknowledged at "+
			strconv.Itoa(n)+" slave sites (minSyncSites) and "+strconv.Itoa(connected)+" are connected; retry later")})
		return
	}
	if tc.SyncDegrade == config.SyncDegradeAsync {
		b.setDegraded(topic, tc, false, connected)
	}
	timeout := b.opts.SiteSyncTimeout
	s.next.storeBatch(ctx, topic, partition, msgs, func(as []store.Appended, err error) {
		if err != nil && len(as) == 0 {
			done(as, err) // nothing stored: nothing to wait for
			return
		}
		rep.AwaitDurable(n, timeout, func(werr error) {
			st := b.siteStats.topic(topic)
			if werr == nil {
				if st.timingOut.CompareAndSwap(true, false) {
					b.log.Info("TOPIC("+topic+"): slave sites fsync puts in time again", "minSyncSites", n)
				}
				done(as, err)
				return
			}
			degrade := tc.SyncDegrade == config.SyncDegradeAsync
			if st.timingOut.CompareAndSwap(false, true) {
				what := "answered as failed"
				if degrade {
					what = "acknowledged anyway (syncDegrade=async)"
				}
				b.log.Warn("TOPIC("+topic+"): puts stored here but not fsynced at their slave sites in time; "+what, "partition", partition,
					"messages", len(msgs), "minSyncSites", n, "err", werr)
			}
			if degrade {
				st.degradedPuts.Add(int64(len(msgs)))
				done(as, err)
				return
			}
			st.failedPuts.Add(int64(len(msgs)))
			done(nil, &slaveError{text: b.putError(topic, int32(partition), "stored at the master but not fsynced at "+
				strconv.Itoa(n)+" slave sites (minSyncSites) within "+timeout.String()+"; retry")})
		})
	})
}

// awaitSites waits until the topic's slave sites are connected or the
// wait AwaitSitesFor allowed is over, then stores the batch (or refuses it
// as storeBatch does).
func (s siteSyncStore) awaitSites(ctx context.Context, topic string, partition int, msgs []store.Message, done func([]store.Appended, error)) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.b.awaitingSites() && s.b.connectedSites() < s.b.topicEntry(topic).tc.MinSyncSites {
		select {
		case <-ctx.Done():
			done(nil, ctx.Err())
			return
		case <-t.C:
		}
	}
	s.storeBatch(ctx, topic, partition, msgs, done) // checks the sites again
}

// AwaitSitesFor makes puts to topics with minSyncSites wait, for d from
// now, for their slave sites to connect instead of being refused (503):
// a new master that took over from a master handing over has its slave
// sites reconnect to it within moments, while the puts the old master
// held for it arrive.
func (b *Broker) AwaitSitesFor(d time.Duration) {
	b.sitesUntil.Store(time.Now().Add(d).UnixNano())
}

func (b *Broker) awaitingSites() bool {
	u := b.sitesUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// storeUnit is siteSyncStore's for a store step that stores units but
// takes no groups (a samsa master, syncMaster.storeUnit): a commit none
// of whose topics has minSyncSites goes to it as one unit; otherwise each
// partition's batch takes storeBatch (its sites waited for on their own),
// and done runs once after the last.
func (s siteSyncStore) storeUnit(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	if us, ok := s.next.(unitStore); ok && !s.anyWaitsForSites(appends) {
		us.storeUnit(ctx, appends, done)
		return
	}
	s.storeEach(ctx, appends, done)
}

// anyWaitsForSites says whether a topic of appends has minSyncSites. A
// read's or a commit's appends mostly share a topic: it is asked once per
// run of the same topic.
func (s siteSyncStore) anyWaitsForSites(appends []store.PartitionAppend) bool {
	for i, a := range appends {
		if i > 0 && a.Topic == appends[i-1].Topic {
			continue
		}
		if te := s.b.topicEntry(a.Topic); te.ok && te.tc.MinSyncSites > 0 {
			return true
		}
	}
	return false
}

// storeEach sends each append through storeBatch (a synchronous topic's
// sites waited for on their own) and calls done once, after the last
// answer, with the outcomes in the order of appends.
func (s siteSyncStore) storeEach(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	outs := make([]store.AppendOutcome, len(appends))
	if len(appends) == 0 {
		done(outs)
		return
	}
	var left atomic.Int32
	left.Store(int32(len(appends)))
	for i, a := range appends {
		s.storeBatch(ctx, a.Topic, a.Partition, a.Msgs, func(as []store.Appended, err error) {
			outs[i] = store.AppendOutcome{Appended: as, Err: err}
			if left.Add(-1) == 0 {
				done(outs)
			}
		})
	}
}

// siteSyncGroupStore is siteSyncStore in front of a groupStore: it keeps
// the one-call path for a read's batches when none of them is for a topic
// with minSyncSites; otherwise each batch takes storeBatch, and done runs
// once after the last. routePuts sends such batches alone
// (waitsForSites), so a mixed group only reaches here when a reload made
// a topic synchronous in between.
type siteSyncGroupStore struct{ siteSyncStore }

func (s siteSyncGroupStore) storeGroup(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	if gs, ok := s.next.(groupStore); ok && !s.anyWaitsForSites(appends) {
		gs.storeGroup(ctx, appends, done)
		return
	}
	s.storeEach(ctx, appends, done)
}

// storeUnit stores a transaction's partitions as one unit (see unitStore):
// when some of them are of topics with minSyncSites, the sites are checked
// once for all of them, the unit is written in one piece and one wait for
// the most sites any of its topics asks for covers all of it, so the
// commit is acknowledged once every partition is at those sites, and a
// refusal (too few sites connected) stores none of it. Without such a
// topic it is the store's unit write alone. A store step that cannot
// write a unit takes the partitions one by one (storeGroup).
func (s siteSyncGroupStore) storeUnit(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	us, ok := s.next.(unitStore)
	if !ok {
		s.storeGroup(ctx, appends, done)
		return
	}
	b := s.b
	need, refuse := 0, false // the most sites asked; a topic refuses without them
	var syncTopics []string
	for i, a := range appends {
		if i > 0 && a.Topic == appends[i-1].Topic {
			continue
		}
		te := b.topicEntry(a.Topic)
		if !te.ok || te.tc.MinSyncSites <= 0 || slices.Contains(syncTopics, a.Topic) {
			continue
		}
		syncTopics = append(syncTopics, a.Topic)
		need = max(need, te.tc.MinSyncSites)
	}
	if need == 0 {
		us.storeUnit(ctx, appends, done)
		return
	}
	rep := b.siteReplicator()
	connected := 0
	if rep != nil {
		connected = rep.ConnectedSites()
	}
	if connected < need && rep != nil && b.awaitingSites() {
		// A new master's slave sites are on their way (AwaitSitesFor):
		// wait for them with a copy of the unit, then decide again.
		held := make([]store.PartitionAppend, len(appends))
		for i, a := range appends {
			held[i] = a
			held[i].Msgs = make([]store.Message, len(a.Msgs))
			for j, m := range a.Msgs {
				held[i].Msgs[j] = m
				held[i].Msgs[j].Body = append([]byte(nil), m.Body...)
			}
		}
		if b.routines.Go(func() { s.awaitSitesUnit(ctx, held, done) }) {
			return
		}
	}
	degraded := map[string]bool{} // topics acknowledged without their sites
	for _, topic := range syncTopics {
		te := b.topicEntry(topic)
		if connected >= te.tc.MinSyncSites {
			if te.tc.SyncDegrade == config.SyncDegradeAsync {
				b.setDegraded(topic, &te.tc, false, connected)
			}
			continue
		}
		if te.tc.SyncDegrade == config.SyncDegradeAsync {
			b.setDegraded(topic, &te.tc, true, connected)
			degraded[topic] = true
			continue
		}
		refuse = true
	}
	count := func(topic string, add func(st *siteSyncTopic, n int64)) {
		for _, a := range appends {
			if a.Topic == topic {
				add(b.siteStats.topic(topic), int64(len(a.Msgs)))
			}
		}
	}
	outs := make([]store.AppendOutcome, len(appends))
	if refuse {
		// Nothing of the unit is stored: one of its topics lacks its sites.
		for _, topic := range syncTopics {
			count(topic, func(st *siteSyncTopic, n int64) { st.refusedPuts.Add(n) })
		}
		for i, a := range appends {
			outs[i].Err = &slaveError{text: b.putError(a.Topic, int32(a.Partition), "the transaction's topics are acknowledged at "+
				strconv.Itoa(need)+" slave sites (minSyncSites) and "+strconv.Itoa(connected)+" are connected; retry later")}
		}
		done(outs)
		return
	}
	for topic := range degraded {
		count(topic, func(st *siteSyncTopic, n int64) { st.degradedPuts.Add(n) })
	}
	wait := 0 // the sites the topics that are not degraded ask for
	for _, topic := range syncTopics {
		if !degraded[topic] {
			wait = max(wait, b.topicEntry(topic).tc.MinSyncSites)
		}
	}
	if wait == 0 {
		us.storeUnit(ctx, appends, done)
		return
	}
	timeout := b.opts.SiteSyncTimeout
	us.storeUnit(ctx, appends, func(outs []store.AppendOutcome) {
		if !slices.ContainsFunc(outs, func(o store.AppendOutcome) bool { return o.Err == nil }) {
			done(outs) // nothing stored: nothing to wait for
			return
		}
		rep.AwaitDurable(wait, timeout, func(werr error) {
			if werr == nil {
				done(outs)
				return
			}
			b.log.Warn("TOPIC("+appends[0].Topic+"): transaction stored here but not fsynced at its slave sites in time; answered as failed",
				"partitions", len(appends), "minSyncSites", wait, "err", werr)
			for i, a := range appends {
				te := b.topicEntry(a.Topic)
				if outs[i].Err != nil || !te.ok || te.tc.MinSyncSites <= 0 || degraded[a.Topic] {
					continue
				}
				b.siteStats.topic(a.Topic).failedPuts.Add(int64(len(a.Msgs)))
				outs[i] = store.AppendOutcome{Err: &slaveError{text: b.putError(a.Topic, int32(a.Partition), "stored at the master but not fsynced at "+
					strconv.Itoa(wait)+" slave sites (minSyncSites) within "+timeout.String()+"; retry")}}
			}
			done(outs)
		})
	})
}

// awaitSitesUnit is awaitSites for a unit (storeUnit).
func (s siteSyncGroupStore) awaitSitesUnit(ctx context.Context, appends []store.PartitionAppend, done func([]store.AppendOutcome)) {
	need := 0
	for _, a := range appends {
		need = max(need, s.b.topicEntry(a.Topic).tc.MinSyncSites)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for s.b.awaitingSites() && s.b.connectedSites() < need {
		select {
		case <-ctx.Done():
			outs := make([]store.AppendOutcome, len(appends))
			for i := range outs {
				outs[i].Err = ctx.Err()
			}
			done(outs)
			return
		case <-t.C:
		}
	}
	s.storeUnit(ctx, appends, done) // checks the sites again
}
