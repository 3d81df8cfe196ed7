package georeplicator

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/broker/store"
	"metaq/broker/wire"
	"metaq/internal/backoff"
)

// MetaQ's async-slave method (see Async slaves in broker/wire/doc.go; MetaQ's metaslave SubscribeHandler):
// the slave is a consumer of its master with group slaveGroup. It reads
// every partition of the master with `get`, from its own end of that
// partition (asking the master with `offset ... 0` where it has none), and
// stores the records it receives byte-identically at the same offsets. It
// works against any MetaQ 1.4.6 master, which has no replication listener;
// the compressed stream (Receiver) is preferred whenever the master offers it.

const (
	defaultFetchSize = 1 << 20  // SubscribeHandler subscribes with 1 MiB
	maxFetchSize     = 32 << 20 // a fetch grows to hold one large record, up to this
)

// MetaQMaster is how the MetaQ method finds its master and what to copy.
// The bundle implements it over ZooKeeper as the Java slave does: the
// master's url from <root>/brokers/ids/<brokerId>/master, the topics it
// registered under topics-sub as <brokerId>-m and their partition counts.
type MetaQMaster interface {
	// Addr returns the master's MetaQ address host:port.
	Addr(ctx context.Context) (string, error)
	// Partitions returns the master's topics and partition counts.
	Partitions(ctx context.Context) (map[string]int, error)
	// ConfigVersion identifies the master's server.ini (its
	// master_config_checksum): when it changes, autoSyncMasterConfig asks
	// for the file again.
	ConfigVersion(ctx context.Context) (string, error)
	// Changed fires when the address, the partitions or the config version
	// may have changed since the last calls. It may return the same channel
	// until it fires.
	Changed() <-chan struct{}
}

// MetaQOptions configure the MetaQ method. Zero values mean defaults.
type MetaQOptions struct {
	// Sink is the slave's store. Required.
	Sink LogSink
	// Master finds the master and its partitions. Required.
	Master MetaQMaster
	// Group is slaveGroup; default meta-slave-group_<SlaveID>.
	Group   string
	SlaveID int
	// MaxDelay is slaveMaxDelayInMills: the back-off after an empty fetch
	// grows by MaxDelay/10 up to MaxDelay. Default 500ms.
	MaxDelay time.Duration
	// FetchSize is the get maxSize. Default 1 MiB.
	FetchSize int
	// Connections bounds the connections to the master. Default 4.
	Connections int
	// RequestTimeout bounds one request. Default 10s.
	RequestTimeout time.Duration
	// Resync re-reads the partitions this often even without a change
	// notice. Default 30s.
	Resync time.Duration
	// OnMasterConfig, when set (autoSyncMasterConfig=true), receives the
	// master's server.ini (`stats config`, as MetaQ's slave asks for it)
	// when the method starts and whenever the master's config changes.
	OnMasterConfig func(ctx context.Context, serverIni []byte) error
	// Dial, when set, opens connections instead of net.Dialer.
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger *slog.Logger // nil = discard
}

func (o *MetaQOptions) validate() error {
	if o.Sink == nil {
		return errors.New("georeplicator: MetaQOptions.Sink is required")
	}
	if o.Master == nil {
		return errors.New("georeplicator: MetaQOptions.Master is required")
	}
	if o.Group == "" {
		o.Group = fmt.Sprintf("meta-slave-group_%d", o.SlaveID)
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 500 * time.Millisecond
	}
	if o.FetchSize <= 0 {
		o.FetchSize = defaultFetchSize
	}
	if o.Connections <= 0 {
		o.Connections = 4
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.Resync <= 0 {
		o.Resync = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

// MetaQPartStatus is one partition's state in the MetaQ method.
type MetaQPartStatus struct {
	Topic     string
	Partition int
	Offset    int64  // the next offset to fetch: this slave's end
	CaughtUp  bool   // the last fetch found nothing new
	Stopped   string // why this partition does not replicate ("" while it does)
}

// MetaQStatus is the MetaQ method's state (slave-status).
type MetaQStatus struct {
	Running     bool
	Connected   bool // the last request to the master was answered
	MasterAddr  string
	Group       string
	Topics      int
	Partitions  int
	CaughtUp    int // partitions whose last fetch found nothing new
	Fetches     int64
	Records     int64
	Bytes       int64
	LastError   string
	LastErrorAt time.Time `json:",omitzero"` // left out of the JSON until an error happens
	Detail      []MetaQPartStatus
}

// MetaQPuller runs the MetaQ method. Start, then Close.
type MetaQPuller struct {
	opts MetaQOptions
	log  *slog.Logger
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	warn *causeLog

	mu      sync.Mutex
	st      MetaQStatus
	parts   map[pkey]*metaqPart
	pool    *metaqPool
	started bool
	confVer string // the master config version last handed to OnMasterConfig
}

// metaqPart is one partition's fetch loop.
type metaqPart struct {
	key    pkey
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	st MetaQPartStatus
}

// NewMetaQPuller validates opts.
func NewMetaQPuller(opts MetaQOptions) (*MetaQPuller, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	p := &MetaQPuller{opts: opts, parts: map[pkey]*metaqPart{},
		log: opts.Logger.With("component", "georeplicator", "role", "slave", "method", "metaq",
			"slave", fmt.Sprintf("SLAVE(%s/%d)", opts.Group, opts.SlaveID))}
	p.warn = newCauseLog(p.log)
	p.st.Group = opts.Group
	p.ctx, p.stop = context.WithCancel(context.Background())
	return p, nil
}

// Start begins copying in the background.
func (p *MetaQPuller) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return errors.New("georeplicator: MetaQ puller already started")
	}
	p.started = true
	p.st.Running = true
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.run()
	}()
	return nil
}

// Close stops every fetch loop and closes the connections. Idempotent.
func (p *MetaQPuller) Close() error {
	p.stop()
	p.wg.Wait()
	p.mu.Lock()
	p.st.Running, p.st.Connected = false, false
	if p.pool != nil {
		p.pool.close()
		p.pool = nil
	}
	p.mu.Unlock()
	return nil
}

// Status returns a snapshot.
func (p *MetaQPuller) Status() MetaQStatus {
	p.mu.Lock()
	st := p.st
	parts := make([]*metaqPart, 0, len(p.parts))
	for _, mp := range p.parts {
		parts = append(parts, mp)
	}
	p.mu.Unlock()
	topics := map[string]bool{}
	st.Detail = nil
	for _, mp := range parts {
		mp.mu.Lock()
		ps := mp.st
		mp.mu.Unlock()
		topics[ps.Topic] = true
		if ps.CaughtUp {
			st.CaughtUp++
		}
		st.Detail = append(st.Detail, ps)
	}
	sort.Slice(st.Detail, func(i, j int) bool {
		a, b := st.Detail[i], st.Detail[j]
		return a.Topic < b.Topic || (a.Topic == b.Topic && a.Partition < b.Partition)
	})
	st.Topics, st.Partitions = len(topics), len(parts)
	return st
}

// StatsLines renders Status for `stats slave`.
func (p *MetaQPuller) StatsLines() []string {
	st := p.Status()
	le := st.LastError
	if le == "" {
		le = "-"
	}
	lines := []string{
		"slave_group " + st.Group,
		fmt.Sprintf("running %t", st.Running),
		fmt.Sprintf("connected %t", st.Connected),
		"master " + orDash(st.MasterAddr),
		fmt.Sprintf("topics %d", st.Topics),
		fmt.Sprintf("partitions %d", st.Partitions),
		fmt.Sprintf("caught_up %d", st.CaughtUp),
		fmt.Sprintf("fetches %d", st.Fetches),
		fmt.Sprintf("records %d", st.Records),
		fmt.Sprintf("bytes %d", st.Bytes),
		"last_error " + le,
	}
	for _, d := range st.Detail {
		lines = append(lines, fmt.Sprintf("%s-%d offset %d caught_up %t%s", d.Topic, d.Partition, d.Offset, d.CaughtUp, stoppedSuffix(d.Stopped)))
	}
	return lines
}

func stoppedSuffix(s string) string {
	if s == "" {
		return ""
	}
	return " stopped " + strings.ReplaceAll(s, " ", "_")
}

func (p *MetaQPuller) clearErr() {
	p.mu.Lock()
	p.st.LastError, p.st.LastErrorAt = "", time.Time{}
	p.mu.Unlock()
}

func (p *MetaQPuller) setErr(err error) {
	p.mu.Lock()
	p.st.LastError, p.st.LastErrorAt = err.Error(), time.Now()
	p.mu.Unlock()
}

// run follows the master: (re)reads its address and partitions whenever
// they may have changed, and keeps one fetch loop per partition.
func (p *MetaQPuller) run() {
	defer p.stopAll()
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: true}
	failing := false
	for p.ctx.Err() == nil {
		changed := p.opts.Master.Changed()
		wait := p.opts.Resync
		if err := p.sync(); err != nil {
			p.setErr(err)
			p.warn.report("master", "", err, "")
			wait = retry.Next()
			failing = true
		} else {
			retry.Reset()
			if failing {
				// The master is found again: its error is history.
				p.clearErr()
				failing = false
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-p.ctx.Done():
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

func (p *MetaQPuller) sync() error {
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.RequestTimeout)
	defer cancel()
	addr, err := p.opts.Master.Addr(ctx)
	if err != nil {
		return fmt.Errorf("georeplicator: find the master: %w", err)
	}
	parts, err := p.opts.Master.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("georeplicator: the master's partitions: %w", err)
	}
	p.mu.Lock()
	if p.pool == nil || p.pool.addr != addr {
		old := p.pool
		p.mu.Unlock()
		if old != nil {
			p.log.Info("REPLICATION: master moved; restarting every partition", "from", old.addr, "to", addr)
			p.stopAll()
			old.close()
		} else {
			p.log.Info("REPLICATION: copying the master with MetaQ's get", "master", addr, "group", p.opts.Group)
		}
		p.mu.Lock()
		p.pool = newMetaqPool(addr, p.opts.Connections, p.opts.RequestTimeout, p.opts.Dial)
		p.st.MasterAddr = addr
	}
	pool := p.pool
	p.mu.Unlock()
	if err := p.syncConfig(ctx, pool); err != nil {
		p.warn.report("config", pool.addr, err, "")
	}
	p.mu.Lock()
	want := map[pkey]bool{}
	for topic, n := range parts {
		for i := 0; i < n; i++ {
			want[pkey{topic, i}] = true
		}
	}
	var gone []*metaqPart
	for k, mp := range p.parts {
		if !want[k] {
			gone = append(gone, mp)
			delete(p.parts, k)
		}
	}
	var added []pkey
	for k := range want {
		if _, ok := p.parts[k]; !ok {
			added = append(added, k)
			p.startPartLocked(k)
		}
	}
	p.mu.Unlock()
	for _, mp := range gone {
		mp.cancel()
		<-mp.done
	}
	if len(added) > 0 {
		sort.Slice(added, func(i, j int) bool {
			return added[i].Topic < added[j].Topic || (added[i].Topic == added[j].Topic && added[i].Partition < added[j].Partition)
		})
		p.log.Info("REPLICATION: following partitions of the master", "count", len(added), "first", fmt.Sprintf("%s-%d", added[0].Topic, added[0].Partition))
	}
	return nil
}

// syncConfig is autoSyncMasterConfig: when the master's config version is
// new, ask for its server.ini with `stats config` (up to 3 tries, as
// SubscribeHandler.tryReloadConfig) and hand it to OnMasterConfig.
func (p *MetaQPuller) syncConfig(ctx context.Context, pool *metaqPool) error {
	if p.opts.OnMasterConfig == nil {
		return nil
	}
	ver, err := p.opts.Master.ConfigVersion(ctx)
	if err != nil {
		return fmt.Errorf("georeplicator: the master's config version: %w", err)
	}
	p.mu.Lock()
	same := p.confVer == ver && ver != ""
	p.mu.Unlock()
	if same {
		return nil
	}
	var ans metaqAnswer
	for try := 0; try < 3; try++ {
		if ans, err = pool.do(ctx, &wire.Stats{Item: "config", HasItem: true, Opaque: metaqOpaque.Add(1), HasOpaque: true}); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	if ans.code != 200 || len(ans.body) == 0 {
		return fmt.Errorf("georeplicator: stats config at master %s: %d %s", pool.addr, ans.code, ans.body)
	}
	if err := p.opts.OnMasterConfig(ctx, ans.body); err != nil {
		return err
	}
	p.mu.Lock()
	p.confVer = ver
	p.mu.Unlock()
	return nil
}

func (p *MetaQPuller) startPartLocked(k pkey) {
	ctx, cancel := context.WithCancel(p.ctx)
	mp := &metaqPart{key: k, cancel: cancel, done: make(chan struct{}), st: MetaQPartStatus{Topic: k.Topic, Partition: k.Partition, Offset: -1}}
	p.parts[k] = mp
	pool := p.pool
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(mp.done)
		p.follow(ctx, pool, mp)
	}()
}

func (p *MetaQPuller) stopAll() {
	p.mu.Lock()
	parts := p.parts
	p.parts = map[pkey]*metaqPart{}
	p.mu.Unlock()
	for _, mp := range parts {
		mp.cancel()
	}
	for _, mp := range parts {
		<-mp.done
	}
}

// partStop is an error after which a partition waits for an operator (or a
// changed master) instead of retrying quickly: a gap or a divergence.
type partStop struct{ reason string }

func (e *partStop) Error() string { return e.reason }

// follow is one partition's fetch loop (MetaQ's FetchRequestRunner for one
// partition, with SimpleFetchManager's back-off).
func (p *MetaQPuller) follow(ctx context.Context, pool *metaqPool, mp *metaqPart) {
	k := mp.key
	max := p.opts.MaxDelay
	var delay time.Duration
	offset := int64(-1)
	size := p.opts.FetchSize
	checkedEnd := false
	retry := backoff.Backoff{Min: max/10 + time.Millisecond, Max: 10 * time.Second, Jitter: true}
	for {
		if delay > 0 {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		var err error
		if offset < 0 {
			offset, err = p.startOffset(ctx, pool, k)
			if err == nil {
				mp.mu.Lock()
				mp.st.Offset, mp.st.Stopped = offset, ""
				mp.mu.Unlock()
				delay = 0
				retry.Reset()
				continue
			}
			offset = -1
		} else {
			var next int64
			var caughtUp bool
			next, caughtUp, err = p.fetch(ctx, pool, k, offset, &size)
			if err == nil && caughtUp && !checkedEnd {
				// Once per run: a master behind this slave answers 404 for
				// ever (unless updateConsumerOffsets), so compare ends.
				checkedEnd = true
				err = p.checkMasterEnd(ctx, pool, k, offset)
			}
			if err == nil {
				mp.mu.Lock()
				mp.st.Offset, mp.st.CaughtUp, mp.st.Stopped = next, caughtUp, ""
				mp.mu.Unlock()
				if caughtUp || next == offset {
					delay = min(delay+max/10, max)
				} else {
					delay = 0
				}
				offset = next
				retry.Reset()
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		p.setErr(err)
		var stop *partStop
		if errors.As(err, &stop) {
			mp.mu.Lock()
			mp.st.Stopped = stop.reason
			mp.mu.Unlock()
			p.warn.report("partition "+k.String(), pool.addr, err, "")
			offset = -1 // look again from the local end after the pause
			delay = 10 * max
			if delay < 10*time.Second {
				delay = 10 * time.Second
			}
			continue
		}
		p.mu.Lock()
		p.st.Connected = false
		p.mu.Unlock()
		p.warn.report("fetch", pool.addr, err, hintFor(err))
		delay = retry.Next()
	}
}

// startOffset is the offset a partition is copied from: this slave's end
// of it, or, when it holds nothing yet, the master's first offset (asked
// with `offset ... 0`, as SlaveOffsetStorage does), so offsets equal the
// master's.
func (p *MetaQPuller) startOffset(ctx context.Context, pool *metaqPool, k pkey) (int64, error) {
	info, err := p.opts.Sink.Partition(k.Topic, k.Partition)
	switch {
	case err == nil && info.Written > info.Min:
		return info.Written, nil
	case err != nil && !errors.Is(err, store.ErrNoPartition):
		return 0, fmt.Errorf("georeplicator: local partition %s: %w", k, err)
	}
	first, err := pool.offset(ctx, k.Topic, p.opts.Group, k.Partition, 0)
	if errors.Is(err, errNoMasterStore) {
		first, err = 0, nil // MetaQ: a 404 means 0
	}
	if err != nil {
		return 0, err
	}
	if err := p.placeEmpty(k, first); err != nil {
		return 0, err
	}
	return first, nil
}

// placeEmpty makes an empty (or absent) local partition start at offset.
func (p *MetaQPuller) placeEmpty(k pkey, offset int64) error {
	info, err := p.opts.Sink.Partition(k.Topic, k.Partition)
	if errors.Is(err, store.ErrNoPartition) {
		return nil // the first append creates it at its offset
	}
	if err != nil {
		return fmt.Errorf("georeplicator: local partition %s: %w", k, err)
	}
	if info.Written > info.Min {
		return &partStop{fmt.Sprintf("the master's data of %s continues at %d but this slave ends at %d: a gap the master cannot fill", k, offset, info.Written)}
	}
	if info.Min == offset {
		return nil
	}
	if err := p.opts.Sink.DeletePartition(k.Topic, k.Partition); err != nil {
		return fmt.Errorf("georeplicator: recreate empty partition %s at %d: %w", k, offset, err)
	}
	return nil
}

// fetch sends one get and stores the whole records of the answer at
// offset. It returns the next offset and whether the master had nothing new.
func (p *MetaQPuller) fetch(ctx context.Context, pool *metaqPool, k pkey, offset int64, size *int) (int64, bool, error) {
	ans, err := pool.get(ctx, k.Topic, p.opts.Group, k.Partition, offset, *size)
	if err != nil {
		return offset, false, err
	}
	p.mu.Lock()
	if !p.st.Connected {
		// Reached the master again after a failure: the error is history.
		p.st.LastError, p.st.LastErrorAt = "", time.Time{}
	}
	p.st.Connected = true
	p.st.Fetches++
	p.mu.Unlock()
	switch {
	case ans.value:
		n, count, err := wholeRecords(ans.body)
		if err != nil {
			return offset, false, fmt.Errorf("georeplicator: %s at %d from master %s: %w", k, offset, pool.addr, err)
		}
		if n == 0 {
			// One record larger than the fetch: grow it, as the Java
			// consumer does.
			if len(ans.body) < *size {
				// Less than asked and no whole record: the record is still
				// being written, or larger than the master's maxTransferSize.
				// Retried, as MetaQ's slave retries for ever.
				return offset, false, fmt.Errorf("georeplicator: %s at %d: the master sent %d bytes, not one whole record; a record larger than its maxTransferSize cannot be copied", k, offset, len(ans.body))
			}
			if *size >= maxFetchSize {
				return offset, false, &partStop{fmt.Sprintf("a record of %s at %d is larger than %d bytes", k, offset, maxFetchSize)}
			}
			*size = min(*size*2, maxFetchSize)
			return offset, false, nil
		}
		*size = p.opts.FetchSize
		end, err := p.opts.Sink.AppendRaw(context.WithoutCancel(ctx), k.Topic, k.Partition, offset, ans.body[:n])
		if err != nil {
			if errors.Is(err, store.ErrOffsetMismatch) {
				return offset, false, &partStop{fmt.Sprintf("storing %s at %d: %v", k, offset, err)}
			}
			return offset, false, fmt.Errorf("georeplicator: store %s at %d: %w", k, offset, err)
		}
		p.mu.Lock()
		p.st.Records += int64(count)
		p.st.Bytes += int64(n)
		p.mu.Unlock()
		return end, false, nil
	case ans.code == 404 || ans.code == 403:
		return offset, true, nil // caught up (or no store yet, or closed)
	case ans.code == 301:
		v, err := strconv.ParseInt(strings.TrimSpace(string(ans.body)), 10, 64)
		if err != nil {
			return offset, false, fmt.Errorf("%w: 301 body %q from %s", ErrProtocol, ans.body, pool.addr)
		}
		if v < offset {
			return offset, false, &partStop{fmt.Sprintf("the master's %s ends at %d, before this slave's end %d: it is not this slave's master, or it lost data", k, v, offset)}
		}
		// The master removed [offset, v) by retention: fine only for an
		// empty partition here.
		if err := p.placeEmpty(k, v); err != nil {
			return offset, false, err
		}
		p.log.Warn("REPLICATION: the master no longer holds this partition's start; copying from its first offset", "partition", k.String(), "from", v)
		return v, false, nil
	}
	return offset, false, fmt.Errorf("georeplicator: get %s at %d from master %s: %d %s", k, offset, pool.addr, ans.code, ans.body)
}

// checkMasterEnd asks the master for its end of a partition: a master
// behind this slave is not its master (or lost data).
func (p *MetaQPuller) checkMasterEnd(ctx context.Context, pool *metaqPool, k pkey, offset int64) error {
	end, err := pool.offset(ctx, k.Topic, p.opts.Group, k.Partition, math.MaxInt64)
	if errors.Is(err, errNoMasterStore) {
		end, err = 0, nil
	}
	if err != nil {
		return err
	}
	if end < offset {
		return &partStop{fmt.Sprintf("the master's %s ends at %d, before this slave's end %d: it is not this slave's master, or it lost data", k, end, offset)}
	}
	return nil
}

// wholeRecords returns the length of the run of whole records at the start
// of b (a get answer may end inside one) and their number. A whole record
// whose checksum fails is an error: nothing of that answer is stored.
func wholeRecords(b []byte) (int, int, error) {
	off, count := 0, 0
	for len(b)-off >= recordHeaderLen {
		l := int(int32(binary.BigEndian.Uint32(b[off:])))
		if l < 0 {
			return 0, 0, fmt.Errorf("%w: negative record length at byte %d", ErrCorruptFrame, off)
		}
		if off+recordHeaderLen+l > len(b) {
			break
		}
		body := b[off+recordHeaderLen : off+recordHeaderLen+l]
		if crc32.ChecksumIEEE(body)&0x7FFFFFFF != binary.BigEndian.Uint32(b[off+4:])&0x7FFFFFFF {
			return 0, 0, fmt.Errorf("%w: record checksum mismatch at byte %d", ErrCorruptFrame, off)
		}
		off += recordHeaderLen + l
		count++
	}
	return off, count, nil
}

func (k pkey) String() string { return k.Topic + "-" + strconv.Itoa(k.Partition) }
