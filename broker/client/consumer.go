package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/internal/backoff"
	"metaq/internal/clock"
	"metaq/internal/hostaddr"
)

// Handler handles one message of a push consumer. It is called from the
// partition's own goroutine, so messages of one partition arrive in order.
// Returning an error redelivers the same message after a delay (the
// partition does not move past it); ctx ends when the partition is taken
// away by a rebalance or the consumer closes.
type Handler func(ctx context.Context, m *Message) error

// StartPosition says where a consumer starts in a partition that has no
// saved offset (or always, with WithIgnoreSavedOffsets).
type StartPosition struct {
	kind   int
	offset int64
	t      time.Time
}

// StartEarliest starts at the oldest message (MetaQ's default offset 0; a
// broker answers 301 to its min offset).
func StartEarliest() StartPosition { return StartPosition{kind: 0} }

// StartLatest starts after the newest message (Long.MAX_VALUE, answered
// with 301 to the max offset).
func StartLatest() StartPosition { return StartPosition{kind: 1} }

// StartAt starts at a byte offset.
func StartAt(offset int64) StartPosition { return StartPosition{kind: 2, offset: offset} }

// StartAtTime starts at the first message stored at or after t (see
// Client.OffsetForTime for how and for the limit with Java brokers).
func StartAtTime(t time.Time) StartPosition { return StartPosition{kind: 3, t: t} }

type consumerOptions struct {
	consumerID     string
	strategy       Strategy
	broadcast      bool
	store          OffsetStore
	offsetFile     string
	start          StartPosition
	ignoreSaved    bool
	commitInterval time.Duration
	fetchSize      int
	maxFetchDelay  time.Duration
	handlerRetry   time.Duration
	noIDCache      bool
	site           string
	preference     ReadPreference
	maxLag         time.Duration
	router         Router
	routeInterval  time.Duration
	static         []Partition
}

// ConsumerOption configures a Consumer.
type ConsumerOption func(*consumerOptions)

// WithConsumerID sets the consumer id; the group member name in ZooKeeper is
// "<group>_<id>". Default "<localIp>-<pid>-<random uuid>" as Java's HEAD.
func WithConsumerID(id string) ConsumerOption { return func(o *consumerOptions) { o.consumerID = id } }

// WithStrategy sets the balancing strategy. Default StrategyDefault.
func WithStrategy(s Strategy) ConsumerOption { return func(o *consumerOptions) { o.strategy = s } }

// WithBroadcast makes a broadcast consumer: the group becomes
// "<group>-<localIp with . and : replaced by ->" so every host gets every
// message, and offsets go to a local file (DefaultOffsetFile unless
// WithOffsetFile), as MetaQ's createBroadcastConsumer does.
func WithBroadcast() ConsumerOption { return func(o *consumerOptions) { o.broadcast = true } }

// WithOffsetStore sets where offsets are kept. Default: ZooKeeper, or a
// local file for broadcast or without ZooKeeper.
func WithOffsetStore(s OffsetStore) ConsumerOption { return func(o *consumerOptions) { o.store = s } }

// WithOffsetFile keeps offsets in a local JSON file at path.
func WithOffsetFile(path string) ConsumerOption {
	return func(o *consumerOptions) { o.offsetFile = path }
}

// WithStart sets where partitions without a saved offset start. Default
// StartEarliest.
func WithStart(p StartPosition) ConsumerOption { return func(o *consumerOptions) { o.start = p } }

// WithIgnoreSavedOffsets applies WithStart even where an offset is saved
// (MetaQ's alwaysConsumeFromMaxOffset, generalised).
func WithIgnoreSavedOffsets() ConsumerOption {
	return func(o *consumerOptions) { o.ignoreSaved = true }
}

// WithCommitInterval sets how often changed offsets are saved. Default 5s
// (commitOffsetPeriodInMills). They are also saved on rebalance and Close.
func WithCommitInterval(d time.Duration) ConsumerOption {
	return func(o *consumerOptions) { o.commitInterval = d }
}

// WithFetchSize sets the get maxSize in bytes. Default 1 MiB. It doubles
// while a record does not fit, up to 16 MiB.
func WithFetchSize(n int) ConsumerOption { return func(o *consumerOptions) { o.fetchSize = n } }

// WithMaxFetchDelay caps the back-off when a partition has no new data.
// Default 5s (maxDelayFetchTimeInMills).
func WithMaxFetchDelay(d time.Duration) ConsumerOption {
	return func(o *consumerOptions) { o.maxFetchDelay = d }
}

// WithHandlerRetryDelay sets the pause before a failed message is handed to
// the handler again. Default 1s.
func WithHandlerRetryDelay(d time.Duration) ConsumerOption {
	return func(o *consumerOptions) { o.handlerRetry = d }
}

// WithoutDuplicateFilter turns off the process-wide LRU of processed
// message ids (see IDCacheSize) for this consumer.
func WithoutDuplicateFilter() ConsumerOption { return func(o *consumerOptions) { o.noIDCache = true } }

// WithSite names the consumer's site, passed to the Router.
func WithSite(site string) ConsumerOption { return func(o *consumerOptions) { o.site = site } }

// WithReadPreference sets the replica preference passed to the Router.
// Default MasterOnly.
func WithReadPreference(p ReadPreference) ConsumerOption {
	return func(o *consumerOptions) { o.preference = p }
}

// WithMaxLag sets the largest replica lag the consumer accepts (0: any),
// passed to the Router.
func WithMaxLag(d time.Duration) ConsumerOption { return func(o *consumerOptions) { o.maxLag = d } }

// WithRouter sets the site-affinity Router that picks the address each
// partition is read from. Without one the consumer reads from the master,
// or a random slave while the master is absent.
func WithRouter(r Router) ConsumerOption { return func(o *consumerOptions) { o.router = r } }

// WithRouteInterval sets how often a partition asks the Router again, so a
// consumer moves back to its preferred replica when it recovers. Default 5s.
func WithRouteInterval(d time.Duration) ConsumerOption {
	return func(o *consumerOptions) { o.routeInterval = d }
}

// WithPartitions fixes the partitions to consume instead of balancing in a
// group (required without ZooKeeper; the broker id is the index in
// Config.Brokers).
func WithPartitions(ps ...Partition) ConsumerOption {
	return func(o *consumerOptions) { o.static = append(o.static, ps...) }
}

// Consumer is a push consumer in a group: it balances partitions with the
// group's other members (Go or Java) through ZooKeeper, fetches each owned
// partition in its own goroutine and hands messages to the topic's Handler.
type Consumer struct {
	c        *Client
	opt      consumerOptions
	group    string
	idString string // <group>_<consumerId>
	store    OffsetStore
	ids      *idCache

	mu       sync.Mutex // guards handlers, started
	handlers map[string]Handler
	started  bool

	balMu     sync.Mutex // held during a rebalance; guards the fields below
	owned     map[string]map[Partition]*partState
	oldParts  map[string][]string
	oldCons   map[string][]string
	fetchStop context.CancelFunc
	fetchWG   sync.WaitGroup
	kick      chan struct{}

	repMu    sync.Mutex // guards repCache
	repCache map[int][]Replica

	closing atomic.Bool
	quit    chan struct{}
	wg      sync.WaitGroup
}

// partState is one owned partition's position.
type partState struct {
	topic string
	p     Partition

	mu     sync.Mutex
	offset int64
	msgID  int64
	dirty  bool
	byTime *time.Time // resolve the start offset by time on first fetch
}

func (s *partState) get() (int64, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offset, s.msgID
}

func (s *partState) set(off, id int64) {
	s.mu.Lock()
	if off != s.offset || id != s.msgID {
		s.offset, s.msgID, s.dirty = off, id, true
	}
	s.mu.Unlock()
}

// NewConsumer makes a consumer of group on c. Subscribe topics, then Start.
func NewConsumer(c *Client, group string, opts ...ConsumerOption) (*Consumer, error) {
	o := consumerOptions{commitInterval: 5 * time.Second, fetchSize: 1 << 20, maxFetchDelay: 5 * time.Second,
		handlerRetry: time.Second, routeInterval: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if group == "" {
		return nil, errors.New("client: consumer needs a group")
	}
	if o.fetchSize <= 0 || o.commitInterval <= 0 || o.maxFetchDelay <= 0 {
		return nil, errors.New("client: fetch size, commit interval and fetch delay must be positive")
	}
	if c.zk == nil && len(o.static) == 0 {
		return nil, errors.New("client: without ZooKeeper a consumer needs WithPartitions")
	}
	if o.broadcast {
		group = group + "-" + strings.NewReplacer(".", "-", ":", "-").Replace(hostaddr.Local())
	}
	if o.consumerID == "" {
		o.consumerID = fmt.Sprintf("%s-%d-%s", hostaddr.Local(), os.Getpid(), uuid())
	}
	cs := &Consumer{c: c, opt: o, group: group, idString: group + "_" + o.consumerID,
		handlers: map[string]Handler{}, owned: map[string]map[Partition]*partState{},
		oldParts: map[string][]string{}, oldCons: map[string][]string{},
		kick: make(chan struct{}, 1), quit: make(chan struct{})}
	switch {
	case o.store != nil:
		cs.store = o.store
	case o.offsetFile != "" || o.broadcast || c.zk == nil:
		path := o.offsetFile
		if path == "" {
			path = DefaultOffsetFile()
		}
		s, err := NewFileOffsetStore(path)
		if err != nil {
			return nil, err
		}
		cs.store = s
	default:
		s, _ := NewZKOffsetStore(c)
		cs.store = s
	}
	if !o.noIDCache {
		cs.ids = processIDCache()
	}
	return cs, nil
}

// Group returns the group name used in ZooKeeper (changed for broadcast).
func (cs *Consumer) Group() string { return cs.group }

// ID returns the member name "<group>_<consumerId>".
func (cs *Consumer) ID() string { return cs.idString }

// Subscribe sets the handler of topic. It must be called before Start.
func (cs *Consumer) Subscribe(topic string, h Handler) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.started {
		return errors.New("client: Subscribe after Start")
	}
	if topic == "" || strings.ContainsAny(topic, ", /") || h == nil {
		return fmt.Errorf("client: bad subscription %q", topic)
	}
	cs.handlers[topic] = h
	return nil
}

func (cs *Consumer) topics() []string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ts := make([]string, 0, len(cs.handlers))
	for t := range cs.handlers {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return ts
}

// Assignment returns the partitions this consumer owns now, per topic.
func (cs *Consumer) Assignment() map[string][]Partition {
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	out := map[string][]Partition{}
	for t, m := range cs.owned {
		for p := range m {
			out[t] = append(out[t], p)
		}
		sort.Slice(out[t], func(i, j int) bool { return out[t][i].String() < out[t][j].String() })
	}
	return out
}

// Start registers the consumer in its group, runs the first rebalance and
// starts fetching. Later changes of the group or of the topics' partitions
// rebalance in the background.
func (cs *Consumer) Start(ctx context.Context) error {
	cs.mu.Lock()
	if cs.started {
		cs.mu.Unlock()
		return errors.New("client: consumer already started")
	}
	if len(cs.handlers) == 0 {
		cs.mu.Unlock()
		return errors.New("client: no subscriptions")
	}
	cs.started = true
	cs.mu.Unlock()

	if cs.c.zk == nil {
		cs.startStatic()
	} else {
		if err := cs.register(ctx); err != nil {
			return err
		}
		ok := false
		for i := 0; i < 7 && !ok; i++ {
			ok = cs.rebalanceOnce(ctx)
			if !ok {
				select {
				case <-time.After(cs.c.cfg.ZKSyncTime):
				case <-ctx.Done():
					cs.abortStart()
					return ctx.Err()
				}
			}
		}
		if !ok {
			cs.c.log.Warn("GROUP("+cs.group+"): first rebalance failed, retrying in the background", "consumer", cs.idString)
		}
		cs.wg.Add(1)
		go cs.balanceLoop()
	}
	cs.wg.Add(1)
	go cs.commitLoop()
	return nil
}

// abortStart undoes a Start that gave up: it stops fetching and leaves the
// group. The consumer cannot be started again.
func (cs *Consumer) abortStart() {
	ctx, cancel := context.WithTimeout(context.Background(), cs.c.cfg.RequestTimeout)
	defer cancel()
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	cs.stopFetchersLocked()
	cs.commitLocked(ctx)
	cs.releaseAllLocked(ctx)
	cs.owned = map[string]map[Partition]*partState{}
	cs.c.zk.deleteNode(ctx, cs.c.cfg.ZKRoot+"/consumers/"+cs.group+"/ids/"+cs.idString)
}

// register writes <root>/consumers/<group>/ids/<idString> with the topics.
func (cs *Consumer) register(ctx context.Context) error {
	p := cs.c.cfg.ZKRoot + "/consumers/" + cs.group + "/ids/" + cs.idString
	data := []byte(strings.Join(cs.topics(), ","))
	err := cs.c.zk.createEphemeral(ctx, p, data)
	if errors.Is(err, errNodeExists) {
		// Ours from this session (same data) is fine, as ZkUtils
		// createEphemeralPathExpectConflict accepts it.
		d, ok, gerr := cs.c.zk.get(ctx, p)
		if gerr == nil && ok && string(d) == string(data) {
			return nil
		}
		return fmt.Errorf("client: consumer id %s already registered", cs.idString)
	}
	if err != nil {
		return fmt.Errorf("client: register consumer: %w", err)
	}
	for _, t := range cs.topics() {
		if err := cs.c.zk.ensurePath(ctx, cs.c.cfg.ZKRoot+"/brokers/topics-sub/"+t); err != nil {
			return err
		}
	}
	return nil
}

// balanceLoop waits for watch events (merging repeats) and rebalances.
func (cs *Consumer) balanceLoop() {
	defer cs.wg.Done()
	retry := 0
	for {
		// Arm the watches, then rebalance: a change that happened before the
		// watches were set is seen by this rebalance, a later one fires them.
		select {
		case <-cs.c.zk.sessionRenewed():
			cs.reregister()
		default:
		}
		stop := make(chan struct{})
		watches := cs.armWatches(stop)
		ctx, cancel := context.WithTimeout(context.Background(), 2*cs.c.cfg.RequestTimeout)
		ok := cs.rebalanceOnce(ctx)
		cancel()
		wait := 30 * time.Second // periodic check in case a watch was lost
		if ok {
			retry = 0
		} else {
			retry++
			cs.c.log.Warn("GROUP("+cs.group+"): rebalance failed, retrying", "consumer", cs.idString, "try", retry)
			wait = cs.c.cfg.ZKSyncTime
		}
		timer := time.NewTimer(wait)
		select {
		case <-cs.quit:
			timer.Stop()
			close(stop)
			return
		case <-watches:
		case <-cs.kick:
		case <-timer.C:
		case <-cs.c.zk.sessionRenewed():
			cs.reregister()
		}
		timer.Stop()
		close(stop)
	}
}

// reregister runs after a session expired: the server deleted our ids and
// owners nodes, so commit, forget the assignment and register again (the
// next rebalance claims partitions anew), as ZKSessionExpireListenner does.
func (cs *Consumer) reregister() {
	cs.c.log.Warn("GROUP("+cs.group+"): new ZooKeeper session, registering again", "consumer", cs.idString)
	ctx, cancel := context.WithTimeout(context.Background(), cs.c.cfg.RequestTimeout)
	defer cancel()
	cs.balMu.Lock()
	cs.stopFetchersLocked()
	cs.commitLocked(ctx)
	cs.owned = map[string]map[Partition]*partState{}
	cs.oldParts = map[string][]string{}
	cs.oldCons = map[string][]string{}
	cs.balMu.Unlock()
	if err := cs.register(ctx); err != nil {
		cs.c.log.Error("GROUP("+cs.group+"): register again failed", "err", err)
	}
}

// armWatches sets child watches on the group's ids and on each topic's
// topics-sub node and returns a channel closed when any fires.
func (cs *Consumer) armWatches(stop <-chan struct{}) <-chan struct{} {
	out := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), cs.c.cfg.RequestTimeout)
	defer cancel()
	paths := []string{cs.c.cfg.ZKRoot + "/consumers/" + cs.group + "/ids"}
	for _, t := range cs.topics() {
		paths = append(paths, cs.c.cfg.ZKRoot+"/brokers/topics-sub/"+t)
	}
	var chans []<-chan struct{}
	for _, p := range paths {
		if err := cs.c.zk.ensurePath(ctx, p); err != nil {
			continue
		}
		_, w, err := cs.c.zk.childrenWatch(ctx, p)
		if err == nil {
			chans = append(chans, w)
		}
	}
	if len(chans) == 0 {
		return nil // nil channel: rely on the periodic check
	}
	var once sync.Once
	for _, w := range chans {
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			select {
			case <-w:
				once.Do(func() { close(out) })
			case <-stop:
			}
		}()
	}
	return out
}

// consumersPerTopic reads the group's members and what they subscribe to,
// each list sorted as strings (getConsumersPerTopic).
func (cs *Consumer) consumersPerTopic(ctx context.Context) (map[string][]string, error) {
	dir := cs.c.cfg.ZKRoot + "/consumers/" + cs.group + "/ids"
	kids, err := cs.c.zk.children(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, k := range kids {
		d, ok, err := cs.c.zk.get(ctx, dir+"/"+k)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("client: consumer %s left during rebalance", k)
		}
		if strings.TrimSpace(string(d)) == "" {
			continue
		}
		for _, t := range strings.Split(string(d), ",") {
			out[t] = append(out[t], k)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out, nil
}

// rebalanceOnce is one try of ZKLoadRebalanceListener.rebalance. On failure
// it releases everything it owns, as the Java client does before retrying.
func (cs *Consumer) rebalanceOnce(ctx context.Context) bool {
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	if cs.closing.Load() {
		return true
	}
	ok, modified, err := cs.rebalanceLocked(ctx)
	if err != nil {
		cs.c.log.Warn("GROUP("+cs.group+"): rebalance error", "consumer", cs.idString, "err", err)
	}
	if !ok && !modified {
		// Nothing changed yet (typically ZooKeeper is unreachable): keep
		// fetching what we own, as the Java client does while its ZkClient
		// waits for the connection, and try again later.
		if cs.fetchStop == nil {
			cs.startFetchersLocked()
		}
		return false
	}
	if !ok {
		cs.stopFetchersLocked()
		cs.commitLocked(ctx)
		cs.releaseAllLocked(ctx)
		cs.owned = map[string]map[Partition]*partState{}
		cs.oldParts = map[string][]string{}
		cs.oldCons = map[string][]string{}
	}
	return ok
}

// rebalanceLocked reports whether it succeeded and whether it changed any
// state (stopped fetchers, released or claimed partitions) before failing.
func (cs *Consumer) rebalanceLocked(ctx context.Context) (ok, modified bool, err error) {
	consumers, err := cs.consumersPerTopic(ctx)
	if err != nil {
		return false, false, err
	}
	parts := map[string][]string{}
	var changed []string
	for _, t := range cs.topics() {
		ps, err := cs.c.subPartitions(ctx, t)
		if err != nil {
			return false, false, err
		}
		if len(ps) > 0 {
			parts[t] = ps
		}
		if !slices.Equal(ps, cs.oldParts[t]) || !slices.Equal(consumers[t], cs.oldCons[t]) {
			changed = append(changed, t)
		}
	}
	if len(changed) == 0 {
		if cs.fetchStop == nil {
			cs.startFetchersLocked()
		}
		return true, false, nil
	}
	cs.stopFetchersLocked()
	cs.commitLocked(ctx)
	for _, t := range changed {
		mine := cs.owned[t]
		if mine == nil {
			mine = map[Partition]*partState{}
			cs.owned[t] = mine
		}
		var want []string
		if len(consumers[t]) > 0 && len(parts[t]) > 0 {
			want = Assign(cs.opt.strategy, cs.idString, consumers[t], parts[t])
		}
		wantSet := map[string]bool{}
		for _, w := range want {
			wantSet[w] = true
		}
		for p := range mine {
			if !wantSet[p.String()] {
				cs.release(ctx, t, p)
				delete(mine, p)
			}
		}
		for _, w := range want {
			p, err := ParsePartition(w)
			if err != nil {
				continue
			}
			if _, ok := mine[p]; ok {
				continue
			}
			if ok, err := cs.claim(ctx, t, p); !ok {
				return false, true, err
			}
			st, err := cs.initialState(ctx, t, p)
			if err != nil {
				return false, true, err
			}
			mine[p] = st
		}
		cs.c.log.Info("GROUP("+cs.group+"): rebalanced", "consumer", cs.idString, "topic", t,
			"consumers", len(consumers[t]), "partitions", len(parts[t]), "owned", want)
	}
	cs.oldParts = parts
	cs.oldCons = consumers
	cs.startFetchersLocked()
	return true, true, nil
}

func (cs *Consumer) ownerPath(topic string, p Partition) string {
	return cs.c.cfg.ZKRoot + "/consumers/" + cs.group + "/owners/" + topic + "/" + p.String()
}

// claim creates the owner node; an existing node with another owner means
// the previous owner has not released it yet, and the rebalance is retried.
func (cs *Consumer) claim(ctx context.Context, topic string, p Partition) (bool, error) {
	path := cs.ownerPath(topic, p)
	err := cs.c.zk.createEphemeral(ctx, path, []byte(cs.idString))
	if errors.Is(err, errNodeExists) {
		d, ok, gerr := cs.c.zk.get(ctx, path)
		if gerr == nil && ok && string(d) == cs.idString {
			return true, nil
		}
		return false, fmt.Errorf("client: partition %s/%s still owned by %s", topic, p, d)
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

func (cs *Consumer) release(ctx context.Context, topic string, p Partition) {
	if err := cs.c.zk.deleteNode(ctx, cs.ownerPath(topic, p)); err != nil {
		cs.c.log.Warn("GROUP("+cs.group+"): release failed", "partition", p.String(), "err", err)
	}
}

func (cs *Consumer) releaseAllLocked(ctx context.Context) {
	for t, m := range cs.owned {
		for p := range m {
			cs.release(ctx, t, p)
		}
	}
}

// initialState loads the saved offset, or applies the start position.
func (cs *Consumer) initialState(ctx context.Context, topic string, p Partition) (*partState, error) {
	st := &partState{topic: topic, p: p, msgID: -1}
	if !cs.opt.ignoreSaved {
		rec, ok, err := cs.store.Load(ctx, cs.group, topic, p)
		if err != nil {
			return nil, err
		}
		if ok {
			st.offset, st.msgID = rec.Offset, rec.MsgID
			return st, nil
		}
	}
	switch cs.opt.start.kind {
	case 1:
		st.offset = math.MaxInt64
	case 2:
		st.offset = cs.opt.start.offset
	case 3:
		t := cs.opt.start.t
		st.byTime = &t
	}
	return st, nil
}

func (cs *Consumer) startStatic() {
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cs.c.cfg.RequestTimeout)
	defer cancel()
	for _, t := range cs.topics() {
		m := map[Partition]*partState{}
		for _, p := range cs.opt.static {
			st, err := cs.initialState(ctx, t, p)
			if err != nil {
				cs.c.log.Warn("TOPIC("+t+"): load offset failed", "err", err)
				st = &partState{topic: t, p: p, msgID: -1}
			}
			m[p] = st
		}
		cs.owned[t] = m
	}
	cs.startFetchersLocked()
}

func (cs *Consumer) startFetchersLocked() {
	ctx, cancel := context.WithCancel(context.Background())
	cs.fetchStop = cancel
	cs.mu.Lock()
	handlers := cs.handlers
	cs.mu.Unlock()
	for t, m := range cs.owned {
		h := handlers[t]
		for _, st := range m {
			cs.fetchWG.Add(1)
			go func() {
				defer cs.fetchWG.Done()
				cs.fetchLoop(ctx, st, h)
			}()
		}
	}
}

func (cs *Consumer) stopFetchersLocked() {
	if cs.fetchStop != nil {
		cs.fetchStop()
		cs.fetchWG.Wait()
		cs.fetchStop = nil
	}
}

// commitLoop saves changed offsets every commit interval.
func (cs *Consumer) commitLoop() {
	defer cs.wg.Done()
	t := time.NewTicker(cs.opt.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-cs.quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cs.c.cfg.RequestTimeout)
		cs.Commit(ctx)
		cancel()
	}
}

// Commit saves the offsets that changed since the last commit now.
func (cs *Consumer) Commit(ctx context.Context) error {
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	return cs.commitLocked(ctx)
}

func (cs *Consumer) commitLocked(ctx context.Context) error {
	var recs []OffsetRecord
	var states []*partState
	for t, m := range cs.owned {
		for p, st := range m {
			st.mu.Lock()
			if st.dirty && st.byTime == nil {
				recs = append(recs, OffsetRecord{Topic: t, Partition: p, Offset: st.offset, MsgID: st.msgID})
				states = append(states, st)
				st.dirty = false
			}
			st.mu.Unlock()
		}
	}
	if len(recs) == 0 {
		return nil
	}
	err := cs.store.Commit(ctx, cs.group, recs)
	if err != nil {
		for _, st := range states {
			st.mu.Lock()
			st.dirty = true
			st.mu.Unlock()
		}
		cs.c.log.Warn("GROUP("+cs.group+"): commit offsets failed", "err", err)
	}
	return err
}

// Close stops fetching, commits offsets, releases owned partitions and
// removes the consumer from its group. It is idempotent.
func (cs *Consumer) Close(ctx context.Context) error {
	if !cs.closing.CompareAndSwap(false, true) {
		return nil
	}
	close(cs.quit)
	cs.wg.Wait()
	cs.balMu.Lock()
	defer cs.balMu.Unlock()
	cs.stopFetchersLocked()
	err := cs.commitLocked(ctx)
	if cs.c.zk != nil {
		cs.releaseAllLocked(ctx)
		if derr := cs.c.zk.deleteNode(ctx, cs.c.cfg.ZKRoot+"/consumers/"+cs.group+"/ids/"+cs.idString); derr != nil && err == nil {
			err = derr
		}
	}
	cs.owned = map[string]map[Partition]*partState{}
	return err
}

// resolve picks the address a partition is read from: the Router's answer,
// or the master, or a random slave while the master is absent.
func (cs *Consumer) resolve(ctx context.Context, topic string, p Partition) (string, error) {
	reps, err := cs.replicas(ctx)
	if err != nil {
		return "", err
	}
	if cs.opt.router != nil {
		addr, err := cs.opt.router.Route(ctx, RouteRequest{Topic: topic, BrokerID: p.BrokerID, Partition: p.Partition,
			Group: cs.group, Site: cs.opt.site, Preference: cs.opt.preference, MaxLag: cs.opt.maxLag,
			Replicas: append([]Replica(nil), reps[p.BrokerID]...)})
		if err == nil && addr != "" {
			return hostPort(addr), nil
		}
	}
	r, ok := pickReplica(reps[p.BrokerID])
	if !ok {
		return "", fmt.Errorf("client: no broker for id %d", p.BrokerID)
	}
	return r.Addr, nil
}

// replicas reads the brokers from ZooKeeper, or returns the last good copy
// when ZooKeeper cannot be read, so fetching goes on through a ZooKeeper
// outage.
func (cs *Consumer) replicas(ctx context.Context) (map[int][]Replica, error) {
	reps, err := cs.c.Replicas(ctx)
	cs.repMu.Lock()
	defer cs.repMu.Unlock()
	if err == nil {
		cs.repCache = reps
		return reps, nil
	}
	if cs.repCache != nil {
		return cs.repCache, nil
	}
	return nil, err
}

// fetchLoop is one partition's fetch-and-handle loop (SimpleFetchManager's
// FetchRequestRunner for one request).
func (cs *Consumer) fetchLoop(ctx context.Context, st *partState, h Handler) {
	log := cs.c.log.With("topic", st.topic, "partition", st.p.String(), "group", cs.group)
	wait := backoff.Backoff{Min: 20 * time.Millisecond, Max: cs.opt.maxFetchDelay}
	pause := func() bool { return clock.Sleep(ctx, wait.Next()) == nil }
	// warn limits repeated failure logs to one every 30s per partition.
	var lastWarn time.Time
	warn := func() bool {
		if time.Since(lastWarn) < 30*time.Second {
			return false
		}
		lastWarn = time.Now()
		return true
	}
	maxSize := cs.opt.fetchSize
	addr := ""
	var routed time.Time
	for ctx.Err() == nil {
		if addr == "" || (cs.opt.router != nil && time.Since(routed) > cs.opt.routeInterval) {
			a, err := cs.resolve(ctx, st.topic, st.p)
			if err != nil {
				if warn() {
					log.Warn("PARTITION: no broker", "err", err)
				}
				if !pause() {
					return
				}
				continue
			}
			if a != addr && addr != "" {
				log.Info("PARTITION: reading from another replica", "from", addr, "to", a)
			}
			addr, routed = a, time.Now()
		}
		st.mu.Lock()
		byTime := st.byTime
		st.mu.Unlock()
		if byTime != nil {
			off, err := cs.c.OffsetForTime(ctx, st.topic, st.p, *byTime)
			if err != nil {
				log.Warn("PARTITION: offset for time failed", "err", err)
				addr = ""
				if !pause() {
					return
				}
				continue
			}
			st.mu.Lock()
			st.byTime, st.offset, st.dirty = nil, off, true
			st.mu.Unlock()
		}
		offset, lastID := st.get()
		r, err := cs.c.Fetch(ctx, FetchRequest{Topic: st.topic, Group: cs.group, Partition: st.p, Offset: offset, MaxSize: maxSize, Addr: addr})
		if ctx.Err() != nil {
			return
		}
		// Hand over whatever complete records came, even before a corrupt one.
		for i := range r.Messages {
			m := &r.Messages[i]
			key := idKey{cs.group, m.ID}
			if cs.ids.seen(key) {
				st.set(m.NextOffset, m.ID)
				continue
			}
			for {
				herr := h(ctx, m)
				if herr == nil {
					break
				}
				if ctx.Err() != nil {
					return
				}
				log.Warn("PARTITION: handler failed, will redeliver", "offset", m.Offset, "err", herr)
				if clock.Sleep(ctx, cs.opt.handlerRetry) != nil {
					return
				}
			}
			cs.ids.add(key)
			st.set(m.NextOffset, m.ID)
		}
		switch {
		case errors.Is(err, ErrCorrupt):
			bad, _ := st.get()
			n, oerr := cs.c.NearestOffset(ctx, st.topic, cs.group, st.p, bad, addr)
			if oerr != nil {
				log.Warn("PARTITION: offset after corrupt record failed", "err", oerr)
				pause()
				continue
			}
			log.Warn("PARTITION: corrupt record, moving to the nearest valid offset", "from", bad, "to", n)
			_, id := st.get()
			st.set(n, id)
			continue
		case err != nil:
			var ce *ConnError
			if errors.As(err, &ce) {
				addr = "" // resolve again: the master may have moved
			}
			if warn() {
				log.Warn("PARTITION: fetch failed", "err", err)
			}
			if !pause() {
				return
			}
			continue
		}
		switch r.Status {
		case 301:
			log.Info("PARTITION: moved", "from", offset, "to", r.NextOffset)
			st.set(r.NextOffset, lastID)
			wait.Reset()
		case 403, 404:
			if !pause() {
				return
			}
		case 200:
			if len(r.Messages) == 0 {
				if r.Bytes >= maxSize && maxSize < 16<<20 {
					maxSize *= 2 // one record is larger than the fetch size
					continue
				}
				if !pause() {
					return
				}
				continue
			}
			wait.Reset()
			if r.Bytes < maxSize/2 && maxSize/2 >= cs.opt.fetchSize {
				maxSize /= 2
			}
		}
	}
}

// uuid returns a random RFC 4122 version 4 UUID string.
func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
