package broker

import (
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/broker/config"
	"metaq/broker/wire"
	"metaq/internal/clock"
)

// Realtime counter names (MetaQ StatConstants), in `stats realtime` order.
const (
	statPut = iota
	statGet
	statOffset
	statGetMiss
	statPutFailed
	statMessageSize
	numStats
)

var statNames = [numStats]string{"put", "get", "offset", "get_miss", "put_failed", "message_size"}

// realtimeResetEvery is MetaQ's RealTimeStatRestTask period.
const realtimeResetEvery = 30 * time.Minute

// statsCounters are the broker's counters (see stats in broker/wire/doc.go). The cumulative ones
// are atomics; the realtime ones (per counter and topic, only for topics
// with stat=true) live under mu and are reset by `stats reset` and every
// 30 minutes, as MetaQ does.
type statsCounters struct {
	clock clock.Clock

	connections    atomic.Int64
	cmdPut         atomic.Int64
	cmdGet         atomic.Int64
	cmdOffset      atomic.Int64
	txBegin        atomic.Int64
	txXABegin      atomic.Int64
	txCommit       atomic.Int64
	txRollback     atomic.Int64
	getMiss        atomic.Int64
	getsSent       atomic.Int64 // get answers sent from the log files (sendfile)
	getsInline     atomic.Int64 // gets answered on the connection's reader (getInline)
	getsBatched    atomic.Int64 // of getsSent, those sent with other answers in one stream (conn.writeFrames)
	getsHeld       atomic.Int64 // gets at the end of their partition that waited for it to grow (holdGet)
	getsHeldEmpty  atomic.Int64 // of getsHeld, those answered 404 after all (GetWait up, or closing)
	getWaiters     atomic.Int64 // waiter goroutines started for held gets (conn.waiter)
	putFailed      atomic.Int64
	protocolErrors atomic.Int64

	connRefusedTotal     atomic.Int64 // over maxConnections
	connRefusedAddress   atomic.Int64 // over maxConnectionsPerAddress
	connClosedIdle       atomic.Int64 // idleTimeout
	connClosedSlow       atomic.Int64 // readTimeout: a request not sent in time
	connClosedStalled    atomic.Int64 // answers not taken while the byte budget is used up
	connClosedSilentBody atomic.Int64 // a reserved body not sent while the byte budget is used up

	// enabled reports whether a topic keeps realtime counters (stat=true).
	enabled func(topic string) bool

	mu        sync.Mutex
	rt        [numStats]map[string]*rtCounter // nil map: nothing counted since start
	lastReset time.Time
}

type rtCounter struct{ count, value int64 }

func newStatsCounters(c clock.Clock) *statsCounters {
	return &statsCounters{clock: c, lastReset: c.Now()}
}

// realtime adds one event with value v to counter k of topic.
func (s *statsCounters) realtime(topic string, k int, v int64) {
	s.realtimeN(topic, k, 1, v)
}

// realtimeN adds n events with total value v to counter k of topic.
func (s *statsCounters) realtimeN(topic string, k int, n, v int64) {
	if n == 0 || (s.enabled != nil && !s.enabled(topic)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAutoResetLocked()
	m := s.rt[k]
	if m == nil {
		m = make(map[string]*rtCounter)
		s.rt[k] = m
	}
	c := m[topic]
	if c == nil {
		if len(m) >= maxCachedTopics {
			return // topic names come from clients: bound the memory
		}
		c = &rtCounter{}
		m[topic] = c
	}
	c.count += n
	c.value += v
}

func (s *statsCounters) maybeAutoResetLocked() {
	if s.clock.Since(s.lastReset) >= realtimeResetEvery {
		s.resetLocked()
	}
}

// reset zeroes the realtime counters; topics seen stay known (MetaQ keeps
// the counter objects), so they answer zeros rather than null.
func (s *statsCounters) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *statsCounters) resetLocked() {
	for _, m := range s.rt {
		for _, c := range m {
			*c = rtCounter{}
		}
	}
	s.lastReset = s.clock.Now()
}

// grouped renders counter k summed over all topics, or over one topic when
// topic != "", in MetaStatLog's format; "null" when nothing was counted,
// "Invalid keyTwo:<topic>" when other topics were counted but not this one.
func (s *statsCounters) grouped(k int, topic string, all bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAutoResetLocked()
	m := s.rt[k]
	if m == nil {
		return "null"
	}
	var sum rtCounter
	if all {
		for _, c := range m {
			sum.count += c.count
			sum.value += c.value
		}
	} else {
		c, ok := m[topic]
		if !ok {
			return "Invalid keyTwo:" + topic
		}
		sum = *c
	}
	dur := int64(s.clock.Since(s.lastReset) / time.Second)
	avgValue, avgCount := "invalid", "invalid"
	if sum.count != 0 {
		avgValue = javaDecimal(float64(sum.value) / float64(sum.count))
	}
	if dur != 0 {
		avgCount = javaDecimal(float64(sum.count) / float64(dur))
	}
	return "Count=" + javaDecimal(float64(sum.count)) + ",Value=" + javaDecimal(float64(sum.value)) +
		",Value/Count=" + avgValue + ",Count/Duration=" + avgCount + ",Duration=" + strconv.FormatInt(dur, 10)
}

// javaDecimal formats like Java's DecimalFormat("#.##"): at most two
// decimals (half-even), no trailing zeros, no decimal point for integers.
func javaDecimal(f float64) string {
	s := strconv.FormatFloat(f, 'f', 2, 64)
	s = strings.TrimRight(s, "0")
	s = strings.TrimSuffix(s, ".")
	if s == "-0" {
		s = "0"
	}
	return s
}

// statTopic reports whether realtime counters are kept for topic.
func (b *Broker) statTopic(topic string) bool {
	tc, ok := b.topicFor(topic)
	return ok && tc.Stat
}

type lineWriter struct{ sb strings.Builder }

func (w *lineWriter) line(vals ...string) {
	w.sb.WriteString(strings.Join(vals, " "))
	w.sb.WriteString("\r\n")
}

// Stats returns the body of `stats <item>` exactly as the protocol sends it
// (see stats in broker/wire/doc.go): "STATS\r\n" ... "END\r\n", except for item "config", whose
// answer is the raw bytes of the configuration file in effect without its
// secrets (config.StripSecrets).
func (b *Broker) Stats(item string) string {
	if item == "config" {
		return string(config.StripSecrets(b.cfg.Load().Raw))
	}
	w := &lineWriter{}
	w.sb.WriteString("STATS\r\n")
	switch {
	case strings.TrimSpace(item) == "":
		b.systemStats(w)
	case item == "topics":
		b.topicsStats(w)
	case item == "offsets":
		for _, p := range b.store.Partitions() {
			w.line(p.Topic, "part", strconv.Itoa(p.Partition), "min_offset", strconv.FormatInt(p.Min, 10), "max_offset", strconv.FormatInt(p.Max, 10))
		}
	case item == "realtime":
		for k := range numStats {
			w.line("realtime_"+statNames[k], b.stats.grouped(k, "", true))
		}
	case item == "help":
		w.line("*EMPTY*", "Returns broker info.")
		w.line("help", "Returns help menu.")
		w.line("topics", "Returns topics statistics detail info.")
		w.line("offsets", "Returns partitions detail info.")
		w.line("realtime", "Returns realtime statistics detail info.")
		w.line("config", "Returns broker's config file content.")
	case item == "reset":
		b.stats.reset()
		w.line("reset", "ok")
	case item == "sync_sites" && b.siteReplicator() != nil:
		b.syncSitesStats(w)
	case item == syncUnitsItem && b.opts.SyncReceiver:
		// Sync units are offered up to the largest body this broker's
		// decoder takes (see handleSyncUnit).
		w.line(syncUnitsItem, strconv.Itoa(b.opts.MaxMessageSize))
	case item == "slave" && b.opts.SlaveStats != nil:
		for _, l := range b.opts.SlaveStats.Lines() {
			w.line(l)
		}
	default:
		b.topicStats(w, item)
	}
	w.sb.WriteString("END\r\n")
	return w.sb.String()
}

func (b *Broker) configTopicNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, tc := range b.cfg.Load().Topics {
		if !seen[tc.Name] {
			seen[tc.Name] = true
			out = append(out, tc.Name)
		}
	}
	return out
}

type topicAgg struct {
	parts           int
	messages, bytes int64
}

func (b *Broker) storeTopics() (map[string]*topicAgg, []string) {
	m := map[string]*topicAgg{}
	var order []string
	for _, p := range b.store.Partitions() {
		a := m[p.Topic]
		if a == nil {
			a = &topicAgg{}
			m[p.Topic] = a
			order = append(order, p.Topic)
		}
		a.parts++
		a.messages += p.Messages
		a.bytes += p.Bytes
	}
	sort.Strings(order)
	return m, order
}

func (b *Broker) systemStats(w *lineWriter) {
	cfg := b.cfg.Load()
	aggs, names := b.storeTopics()
	var total int64
	for _, a := range aggs {
		total += a.messages
	}
	topics := len(names)
	for _, t := range b.configTopicNames() {
		if aggs[t] == nil {
			topics++
		}
	}
	port := 0
	if a := b.Addr(); a != nil {
		if i := strings.LastIndexByte(a.String(), ':'); i >= 0 {
			port, _ = strconv.Atoi(a.String()[i+1:])
		}
	}
	uptime := int64(0)
	if b.isStarted() {
		uptime = int64(b.opts.Clock.Since(b.startedAt) / time.Second)
	}
	slave := false
	if b.opts.SlaveStats != nil {
		slave = b.opts.SlaveStats.IsSlave()
	}
	i64 := func(v int64) string { return strconv.FormatInt(v, 10) }
	w.line("pid", strconv.Itoa(os.Getpid()))
	w.line("broker_id", strconv.Itoa(cfg.System.BrokerID))
	w.line("port", strconv.Itoa(port))
	w.line("uptime", i64(uptime))
	w.line("version", b.opts.Version)
	w.line("slave", strconv.FormatBool(slave))
	w.line("curr_connections", i64(b.stats.connections.Load()))
	w.line("threads", strconv.Itoa(runtime.NumGoroutine()))
	w.line("cmd_put", i64(b.stats.cmdPut.Load()))
	w.line("cmd_get", i64(b.stats.cmdGet.Load()))
	w.line("cmd_offset", i64(b.stats.cmdOffset.Load()))
	w.line("tx_begin", i64(b.stats.txBegin.Load()))
	w.line("tx_xa_begin", i64(b.stats.txXABegin.Load()))
	w.line("tx_commit", i64(b.stats.txCommit.Load()))
	w.line("tx_rollback", i64(b.stats.txRollback.Load()))
	w.line("get_miss", i64(b.stats.getMiss.Load()))
	w.line("put_failed", i64(b.stats.putFailed.Load()))
	w.line("total_messages", i64(total))
	w.line("topics", strconv.Itoa(topics))
	w.line("config_checksum", strconv.FormatUint(uint64(cfg.Checksum), 10))
}

func (b *Broker) topicsStats(w *lineWriter) {
	aggs, names := b.storeTopics()
	for _, t := range names {
		a := aggs[t]
		pub, sub := true, true
		if tc, ok := b.topicFor(t); ok {
			pub, sub = tc.AcceptPublish, tc.AcceptSubscribe
		}
		w.line(t, "partitions", strconv.Itoa(a.parts), "message_count", strconv.FormatInt(a.messages, 10),
			"message_bytes", strconv.FormatInt(a.bytes, 10), "accept_publish", strconv.FormatBool(pub),
			"accept_subscribe", strconv.FormatBool(sub))
	}
	for _, t := range b.configTopicNames() {
		if aggs[t] == nil {
			w.line(t, "*Empty*")
		}
	}
}

func (b *Broker) topicStats(w *lineWriter, topic string) {
	aggs, _ := b.storeTopics()
	code := 0
	a := aggs[topic]
	if a == nil {
		a = &topicAgg{}
		code = 1
		for _, t := range b.configTopicNames() {
			if t == topic {
				code = 2
			}
		}
	}
	w.line(topic)
	w.line("resultCode", strconv.Itoa(code))
	w.line("partitions", strconv.Itoa(a.parts))
	w.line("message_count", strconv.FormatInt(a.messages, 10))
	w.line("bytes", strconv.FormatInt(a.bytes, 10))
	for k := range numStats {
		w.line("topic_realtime_"+statNames[k], b.stats.grouped(k, topic, false))
	}
}

// handleStats answers stats; `stats config` sends the raw config file.
func (b *Broker) handleStats(c *conn, cmd *wire.Stats) {
	if cmd.Item == "config" {
		cfg := b.cfg.Load()
		if cfg.Raw == nil {
			c.sendResult(wire.StatusInternalServerError, "Config file not found:"+cfg.File, cmd.Opaque)
			return
		}
		// The port is open to every client: secrets ([site] token, [gossip]
		// key) are left out.
		body := config.StripSecrets(cfg.Raw)
		c.send(outFrame{head: (&wire.Result{Code: wire.StatusOK, Opaque: cmd.Opaque, Body: body}).AppendTo(nil)})
		return
	}
	c.sendResult(wire.StatusOK, b.Stats(cmd.Item), cmd.Opaque)
}
