package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	"metaq/broker/registry"
)

// Config is what producers and consumers of one Client share: where the
// brokers are and how connections behave. A zero field means its default.
type Config struct {
	// ZKServers lists ZooKeeper "host:port" addresses. When empty the client
	// runs without ZooKeeper and uses Brokers.
	ZKServers []string
	// ZKRoot is MetaQ's zk.zkRoot. Default "/meta".
	ZKRoot string
	// ZKSessionTimeout is the ZooKeeper session timeout. Default 30s (as
	// MetaQ's zkSessionTimeoutMs).
	ZKSessionTimeout time.Duration
	// ZKConnectTimeout bounds the wait for the first session. Default 10s.
	ZKConnectTimeout time.Duration
	// ZKSyncTime is waited between rebalance tries (MetaQ zkSyncTimeMs).
	// Default 5s.
	ZKSyncTime time.Duration

	// Brokers is a static list of "host:port" or "meta://host:port" used
	// when ZKServers is empty. Broker i of the list has broker id i; sends
	// go with partition -1 so the broker picks one (as the Java client does
	// with a fixed serverUrl).
	Brokers []string

	// DialTimeout bounds a TCP connect. Default 10s.
	DialTimeout time.Duration
	// Dial, when set, opens the connections to brokers instead of
	// net.Dialer (a proxy, a test's fault injection). It is called with a
	// context that ends after DialTimeout, from several goroutines at once.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RequestTimeout bounds one request when the caller's context has no
	// deadline. Default 10s (MetaQ's fetchTimeoutInMills).
	RequestTimeout time.Duration
	// HeartbeatInterval: a connection idle this long sends `version`.
	// Default 10s (gecko's idle time). Negative disables heartbeats.
	HeartbeatInterval time.Duration

	// Logger receives state changes; nil discards.
	Logger *slog.Logger
}

func (c *Config) validate() error {
	if c.ZKRoot == "" {
		c.ZKRoot = "/meta" // MetaQ's default zk.zkRoot
	}
	c.ZKRoot = normRoot(c.ZKRoot)
	if c.ZKSessionTimeout == 0 {
		c.ZKSessionTimeout = 30 * time.Second
	}
	if c.ZKConnectTimeout == 0 {
		c.ZKConnectTimeout = 10 * time.Second
	}
	if c.ZKSyncTime == 0 {
		c.ZKSyncTime = 5 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(c.ZKServers) == 0 && len(c.Brokers) == 0 {
		return errors.New("client: config needs ZKServers or Brokers")
	}
	for i, b := range c.Brokers {
		c.Brokers[i] = hostPort(b)
	}
	return nil
}

// Client holds the connections to brokers (one per broker address, shared by
// all producers and consumers made from it) and the ZooKeeper session.
type Client struct {
	cfg  Config
	log  *slog.Logger
	pool *pool
	zk   zkStore // nil without ZooKeeper
}

// New connects to ZooKeeper (if configured) and returns a Client. Broker
// connections are made on first use.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	hb := cfg.HeartbeatInterval
	if hb < 0 {
		hb = 0
	}
	c.pool = newPool(defaultCodec(), cfg.DialTimeout, cfg.Dial, hb, cfg.Logger)
	if len(cfg.ZKServers) > 0 {
		z, err := dialZK(ctx, cfg.ZKServers, cfg.ZKRoot, cfg.ZKSessionTimeout, cfg.ZKConnectTimeout, cfg.Logger)
		if err != nil {
			return nil, err
		}
		c.zk = z
	}
	return c, nil
}

// Close closes broker connections and the ZooKeeper session. Producers and
// consumers made from the client must be closed first.
func (c *Client) Close() error {
	c.pool.close()
	if c.zk != nil {
		c.zk.close()
	}
	return nil
}

// Root returns the normalised ZooKeeper root.
func (c *Client) Root() string { return c.cfg.ZKRoot }

// withTimeout applies RequestTimeout when ctx has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}

// hostPort strips meta:// and a ?slaveId=... suffix from a broker url.
func hostPort(url string) string {
	url = strings.TrimPrefix(url, "meta://")
	if i := strings.IndexByte(url, '?'); i >= 0 {
		url = url[:i]
	}
	return strings.TrimSpace(url)
}

// StatusError is a non-200 answer from a broker.
type StatusError struct {
	Code int
	Text string
	Addr string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("client: broker %s answered %d: %s", e.Addr, e.Code, e.Text)
}

// Retriable reports whether a request that failed with err can be sent
// again without risking a duplicate: the connection failed before the
// request was written, or the broker answered 503 (no processor or thread
// pool busy: the request was not run). Every other failure, including a
// lost connection after the request was written and 504, has an unknown
// outcome or is final, so it is not retried.
func Retriable(err error) bool {
	var ce *ConnError
	if errors.As(err, &ce) {
		return !ce.Written
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == 503
	}
	return false
}

// Replicas returns every broker id with its master and slaves as found
// under <root>/brokers/ids (see Consumer groups in broker/wire/doc.go), or the static list.
func (c *Client) Replicas(ctx context.Context) (map[int][]Replica, error) {
	out := make(map[int][]Replica)
	if c.zk == nil {
		for i, b := range c.cfg.Brokers {
			out[i] = []Replica{{Addr: b, Master: true, SlaveID: -1}}
		}
		return out, nil
	}
	base := c.cfg.ZKRoot + "/brokers/ids"
	ids, err := c.zk.children(ctx, base)
	if err != nil {
		return nil, err
	}
	for _, s := range ids {
		id, err := strconv.Atoi(s)
		if err != nil {
			continue // Java would fail here; skipping a stray node is kinder
		}
		kids, err := c.zk.children(ctx, base+"/"+s)
		if err != nil {
			return nil, err
		}
		var reps []Replica
		for _, k := range kids {
			slave, ok := registry.ParseBrokerNode(k)
			if !ok {
				continue
			}
			d, ok, err := c.zk.get(ctx, base+"/"+s+"/"+k)
			if err != nil {
				return nil, err
			}
			if !ok || len(d) == 0 {
				continue
			}
			reps = append(reps, Replica{Addr: hostPort(string(d)), Master: slave < 0, SlaveID: slave})
		}
		if len(reps) > 0 {
			sort.Slice(reps, func(i, j int) bool { return reps[i].SlaveID < reps[j].SlaveID })
			out[id] = reps
		}
	}
	return out, nil
}

// topicBroker is the JSON under topics-pub and topics-sub.
type topicBroker struct {
	NumParts int    `json:"numParts"`
	Broker   string `json:"broker"`
}

// pubTopology is what a producer needs for one topic (see Producers in broker/wire/doc.go).
type pubTopology struct {
	partitions []Partition     // sorted by (brokerId, partition)
	masters    map[int]string  // brokerId -> host:port
	watch      <-chan struct{} // closed when topics-pub/<topic> children change
}

// pubTopology reads topics-pub/<topic> and the masters of its brokers.
// With watch set it leaves a child watch and returns its channel.
func (c *Client) pubTopology(ctx context.Context, topic string, watch bool) (pubTopology, error) {
	var t pubTopology
	t.masters = make(map[int]string)
	if c.zk == nil {
		for i, b := range c.cfg.Brokers {
			t.masters[i] = b
			t.partitions = append(t.partitions, Partition{BrokerID: i, Partition: -1})
		}
		return t, nil
	}
	p := c.cfg.ZKRoot + "/brokers/topics-pub/" + topic
	var kids []string
	var err error
	if watch {
		if err := c.zk.ensurePath(ctx, p); err != nil {
			return t, err
		}
		kids, t.watch, err = c.zk.childrenWatch(ctx, p)
	} else {
		kids, err = c.zk.children(ctx, p)
	}
	if err != nil {
		return t, err
	}
	for _, k := range kids {
		if !strings.HasSuffix(k, "-m") {
			continue // slaves never take puts
		}
		id, err := strconv.Atoi(strings.TrimSuffix(k, "-m"))
		if err != nil {
			continue
		}
		m, ok, err := c.zk.get(ctx, fmt.Sprintf("%s/brokers/ids/%d/master", c.cfg.ZKRoot, id))
		if err != nil {
			return t, err
		}
		if !ok || len(m) == 0 {
			continue
		}
		d, ok, err := c.zk.get(ctx, p+"/"+k)
		if err != nil {
			return t, err
		}
		if !ok {
			continue
		}
		var tb topicBroker
		if err := json.Unmarshal(d, &tb); err != nil {
			c.log.Warn("TOPIC("+topic+"): bad topics-pub data", "node", k, "err", err)
			continue
		}
		t.masters[id] = hostPort(string(m))
		for i := 0; i < tb.NumParts; i++ {
			t.partitions = append(t.partitions, Partition{BrokerID: id, Partition: i})
		}
	}
	sort.Slice(t.partitions, func(i, j int) bool {
		a, b := t.partitions[i], t.partitions[j]
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		return a.Partition < b.Partition
	})
	return t, nil
}

// Partitions returns the partitions producers write to for topic (from
// topics-pub, sorted by broker id and partition), or one partition -1 per
// static broker.
func (c *Client) Partitions(ctx context.Context, topic string) ([]Partition, error) {
	t, err := c.pubTopology(ctx, topic, false)
	return t.partitions, err
}

// subPartitions returns the partition strings consumers balance for topic,
// exactly as MetaZookeeper.getPartitionStringsForSubTopics builds them: for
// every X-Y child of topics-sub/<topic> (masters and slaves) the strings
// "X-0".."X-(n-1)" without duplicates, sorted as strings.
func (c *Client) subPartitions(ctx context.Context, topic string) ([]string, error) {
	p := c.cfg.ZKRoot + "/brokers/topics-sub/" + topic
	kids, err := c.zk.children(ctx, p)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range kids {
		parts := strings.Split(k, "-")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			continue
		}
		d, ok, err := c.zk.get(ctx, p+"/"+k)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		var tb topicBroker
		if err := json.Unmarshal(d, &tb); err != nil {
			continue
		}
		for i := 0; i < tb.NumParts; i++ {
			s := parts[0] + "-" + strconv.Itoa(i)
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// Topics lists the topics registered in ZooKeeper (under topics-pub,
// topics-sub and the deprecated topics tree).
func (c *Client) Topics(ctx context.Context) ([]string, error) {
	if c.zk == nil {
		return nil, errors.New("client: listing topics needs ZooKeeper")
	}
	seen := map[string]bool{}
	for _, tree := range []string{"topics", "topics-pub", "topics-sub"} {
		kids, err := c.zk.children(ctx, c.cfg.ZKRoot+"/brokers/"+tree)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			seen[k] = true
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

// masterAddr returns the address of the master of a broker id (or the
// static broker), falling back to a slave as Cluster.getBrokerRandom does.
func (c *Client) brokerAddr(ctx context.Context, brokerID int) (string, error) {
	reps, err := c.Replicas(ctx)
	if err != nil {
		return "", err
	}
	r, ok := pickReplica(reps[brokerID])
	if !ok {
		return "", fmt.Errorf("client: no broker registered for id %d", brokerID)
	}
	return r.Addr, nil
}

// FetchResult is the outcome of one get.
type FetchResult struct {
	// Messages are the complete records in the answer, in order.
	Messages []Message
	// NextOffset is where the next fetch should start: past the last
	// complete record, or the broker's suggestion after a 301.
	NextOffset int64
	// Status is 200 (data, possibly no complete record), 301 (moved: use
	// NextOffset), 403 (partition closed) or 404 (nothing at this offset
	// yet, or no such partition).
	Status int
	// Bytes is the size of the value body (0 unless Status is 200).
	Bytes int
}

// FetchRequest names what to fetch. Addr, when set, overrides the broker
// address (e.g. a slave chosen by a Router).
type FetchRequest struct {
	Topic     string
	Group     string
	Partition Partition
	Offset    int64
	MaxSize   int
	Addr      string
}

// Fetch sends one get and decodes the answer. 301, 403 and 404 are
// reported in FetchResult.Status with a nil error, since the Java client
// treats them as routine (move, no data). A record that fails its checksum
// gives ErrCorrupt together with the records before it.
func (c *Client) Fetch(ctx context.Context, r FetchRequest) (FetchResult, error) {
	if r.MaxSize <= 0 {
		r.MaxSize = 1 << 20
	}
	addr := r.Addr
	if addr == "" {
		var err error
		if addr, err = c.brokerAddr(ctx, r.Partition.BrokerID); err != nil {
			return FetchResult{}, err
		}
	}
	if r.Group == "" {
		r.Group = "metaq-go"
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	f, err := c.pool.do(ctx, addr, func(dst []byte, op int32) []byte {
		return c.pool.codec.appendGet(dst, r.Topic, r.Group, r.Partition.Partition, r.Offset, r.MaxSize, op)
	})
	if err != nil {
		return FetchResult{}, err
	}
	res := FetchResult{NextOffset: r.Offset}
	if f.value {
		res.Status = 200
		res.Bytes = len(f.body)
		msgs, n, err := decodeRecords(r.Topic, r.Partition, r.Offset, f.body)
		res.Messages = msgs
		res.NextOffset = r.Offset + int64(n)
		return res, err
	}
	res.Status = f.code
	switch f.code {
	case 301:
		v, err := strconv.ParseInt(strings.TrimSpace(string(f.body)), 10, 64)
		if err != nil {
			return res, fmt.Errorf("client: bad 301 body %q from %s", f.body, addr)
		}
		res.NextOffset = v
		return res, nil
	case 403, 404:
		return res, nil
	}
	return res, &StatusError{Code: f.code, Text: string(f.body), Addr: addr}
}

// ErrNoStore is returned by NearestOffset when the broker has no store for
// the partition (it answered 404).
var ErrNoStore = errors.New("client: partition has no store on the broker")

// NearestOffset sends `offset`: the answer is the start of the segment that
// holds offset, the partition's max offset when offset is beyond it, or its
// min offset when offset is below it (see offset in broker/wire/doc.go).
func (c *Client) NearestOffset(ctx context.Context, topic, group string, p Partition, offset int64, addr string) (int64, error) {
	if addr == "" {
		var err error
		if addr, err = c.brokerAddr(ctx, p.BrokerID); err != nil {
			return 0, err
		}
	}
	if group == "" {
		group = "metaq-go"
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	f, err := c.pool.do(ctx, addr, func(dst []byte, op int32) []byte {
		return c.pool.codec.appendOffset(dst, topic, group, p.Partition, offset, op)
	})
	if err != nil {
		return 0, err
	}
	switch f.code {
	case 200:
		v, err := strconv.ParseInt(strings.TrimSpace(string(f.body)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("client: bad offset answer %q from %s", f.body, addr)
		}
		return v, nil
	case 404:
		return 0, ErrNoStore
	}
	return 0, &StatusError{Code: f.code, Text: string(f.body), Addr: addr}
}

// EarliestOffset returns the partition's min offset (0 when it has no store).
func (c *Client) EarliestOffset(ctx context.Context, topic string, p Partition) (int64, error) {
	v, err := c.NearestOffset(ctx, topic, "", p, 0, "")
	if errors.Is(err, ErrNoStore) {
		return 0, nil
	}
	return v, err
}

// LatestOffset returns the partition's readable end (0 when it has no store).
func (c *Client) LatestOffset(ctx context.Context, topic string, p Partition) (int64, error) {
	v, err := c.NearestOffset(ctx, topic, "", p, math.MaxInt64, "")
	if errors.Is(err, ErrNoStore) {
		return 0, nil
	}
	return v, err
}

// readRecordAt reads the one record that starts at off, growing the fetch
// size until it is complete. ok is false at the end of the partition.
func (c *Client) readRecordAt(ctx context.Context, topic string, p Partition, off int64) (Message, bool, error) {
	size := 256
	for size <= 4*maxRecordBody {
		r, err := c.Fetch(ctx, FetchRequest{Topic: topic, Partition: p, Offset: off, MaxSize: size})
		if err != nil {
			return Message{}, false, err
		}
		switch {
		case r.Status != 200:
			return Message{}, false, nil
		case len(r.Messages) > 0:
			return r.Messages[0], true, nil
		case r.Bytes < size:
			return Message{}, false, nil // partial record at the end of a segment
		}
		size *= 4
	}
	return Message{}, false, fmt.Errorf("client: record at %d is larger than %d bytes", off, maxRecordBody)
}

// OffsetForTime returns the offset of the first message in the partition
// stored at or after t, or the partition's end if there is none.
//
// The broker has no time index on the wire, so this relies on message ids
// carrying the wall-clock time they were stored (this project's broker; see
// IDTime). It binary searches the segment starts (`offset` answers a
// segment's start for any byte inside it), reading one record at each, then
// scans the chosen segment record by record in fetch-sized batches. Against
// a Java 1.4.6 broker, whose ids count from boot, the answer is meaningless.
func (c *Client) OffsetForTime(ctx context.Context, topic string, p Partition, t time.Time) (int64, error) {
	lo, err := c.EarliestOffset(ctx, topic, p)
	if err != nil {
		return 0, err
	}
	hi, err := c.LatestOffset(ctx, topic, p)
	if err != nil {
		return 0, err
	}
	if hi <= lo {
		return hi, nil
	}
	firstTime := map[int64]int64{} // segment start -> id of its first record
	before := func(x int64) (int64, bool, error) {
		s, err := c.NearestOffset(ctx, topic, "", p, x, "")
		if err != nil {
			return 0, false, err
		}
		id, ok := firstTime[s]
		if !ok {
			m, found, err := c.readRecordAt(ctx, topic, p, s)
			if err != nil {
				return 0, false, err
			}
			if !found {
				return s, false, nil
			}
			id = m.ID
			firstTime[s] = id
		}
		return s, IDTime(id).Before(t), nil
	}
	start, ok, err := before(lo)
	if err != nil {
		return 0, err
	}
	if !ok {
		return start, nil // even the first message is at or after t
	}
	// Largest x in [lo, hi) whose segment starts before t.
	a, b := lo, hi-1
	for a < b {
		mid := a + (b-a+1)/2
		s, ok, err := before(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			a = mid
			start = s
		} else {
			b = mid - 1
		}
	}
	off := start
	for off < hi {
		r, err := c.Fetch(ctx, FetchRequest{Topic: topic, Partition: p, Offset: off, MaxSize: 256 << 10})
		if err != nil {
			return 0, err
		}
		if r.Status != 200 {
			return hi, nil
		}
		for _, m := range r.Messages {
			if !IDTime(m.ID).Before(t) {
				return m.Offset, nil
			}
		}
		if r.NextOffset == off {
			// No complete record in the slice: the record runs past the fetch size
			// or the segment file ends; read it alone.
			m, found, err := c.readRecordAt(ctx, topic, p, off)
			if err != nil {
				return 0, err
			}
			if !found {
				// Segment end inside a torn tail: continue at the next segment.
				n, err := c.NearestOffset(ctx, topic, "", p, off+1, "")
				if err != nil || n <= off {
					return hi, err
				}
				off = n
				continue
			}
			if !IDTime(m.ID).Before(t) {
				return m.Offset, nil
			}
			off = m.NextOffset
			continue
		}
		off = r.NextOffset
	}
	return hi, nil
}

// SubscribedPartitions returns the partitions consumers balance for topic
// (from topics-sub, masters and slaves, sorted as strings as the Java
// consumer sorts them).
func (c *Client) SubscribedPartitions(ctx context.Context, topic string) ([]Partition, error) {
	if c.zk == nil {
		return nil, errors.New("client: subscribed partitions need ZooKeeper")
	}
	ss, err := c.subPartitions(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make([]Partition, 0, len(ss))
	for _, s := range ss {
		if p, err := ParsePartition(s); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// GroupOwners returns which group member owns each partition of topic now
// (<root>/consumers/<group>/owners/<topic>).
func (c *Client) GroupOwners(ctx context.Context, group, topic string) (map[Partition]string, error) {
	if c.zk == nil {
		return nil, errors.New("client: group owners need ZooKeeper")
	}
	dir := c.cfg.ZKRoot + "/consumers/" + group + "/owners/" + topic
	kids, err := c.zk.children(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := map[Partition]string{}
	for _, k := range kids {
		p, err := ParsePartition(k)
		if err != nil {
			continue
		}
		d, ok, err := c.zk.get(ctx, dir+"/"+k)
		if err != nil {
			return nil, err
		}
		if ok {
			out[p] = string(d)
		}
	}
	return out, nil
}

// GroupMembers returns the member names registered under
// <root>/consumers/<group>/ids.
func (c *Client) GroupMembers(ctx context.Context, group string) ([]string, error) {
	if c.zk == nil {
		return nil, errors.New("client: group members need ZooKeeper")
	}
	ids, err := c.zk.children(ctx, c.cfg.ZKRoot+"/consumers/"+group+"/ids")
	sort.Strings(ids)
	return ids, err
}
