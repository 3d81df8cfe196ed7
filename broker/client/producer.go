package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"metaq/internal/backoff"
)

// SendResult is the broker's acknowledgement of one message.
type SendResult struct {
	// ID is the message id the broker assigned.
	ID int64
	// Partition is where the message was stored (broker id from ZooKeeper,
	// partition from the answer, so it is right even when the broker picked).
	Partition Partition
	// Offset is the byte offset where the message's record starts (-1 in a
	// transaction, or when AcceptedLocally).
	Offset int64
	// AcceptedLocally says a slave site's write gateway stored the message
	// in its outbox (storeAndForward) and carries it to the master later:
	// ID and Partition are final, the master's offset is not known yet.
	AcceptedLocally bool
}

type producerOptions struct {
	selector    Selector
	maxInFlight int
	retries     int
	backoff     time.Duration
}

// ProducerOption configures a Producer.
type ProducerOption func(*producerOptions)

// WithSelector sets the partition selector. Default: &RoundRobin{}.
func WithSelector(s Selector) ProducerOption { return func(o *producerOptions) { o.selector = s } }

// WithMaxInFlight bounds the number of SendAsync messages awaiting an
// answer; SendAsync blocks while the window is full. Default 1024.
func WithMaxInFlight(n int) ProducerOption { return func(o *producerOptions) { o.maxInFlight = n } }

// WithRetries sets how many times a send is retried after a retriable
// failure (see Retriable). Default 3. Non-retriable failures are never
// resent, so a retry cannot store a message twice.
func WithRetries(n int) ProducerOption { return func(o *producerOptions) { o.retries = n } }

// WithRetryBackoff sets the pause before a retry (doubled each time, at
// most 5s). Default 200ms.
func WithRetryBackoff(d time.Duration) ProducerOption {
	return func(o *producerOptions) { o.backoff = d }
}

// Producer sends messages to the masters of a topic's partitions.
// It is safe for concurrent use.
type Producer struct {
	c   *Client
	opt producerOptions

	window   chan struct{} // one token per async send in flight
	inflight sync.WaitGroup

	mu     sync.Mutex
	topics map[string]*pubTopic

	closing atomic.Bool
	quit    chan struct{}
	wg      sync.WaitGroup
}

type pubTopic struct {
	mu    sync.Mutex
	ready chan struct{} // closed once t is first loaded
	t     pubTopology
	err   error
}

// NewProducer makes a producer on c.
func NewProducer(c *Client, opts ...ProducerOption) (*Producer, error) {
	o := producerOptions{maxInFlight: 1024, retries: 3, backoff: 200 * time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	if o.selector == nil {
		o.selector = &RoundRobin{}
	}
	if o.maxInFlight <= 0 {
		return nil, errors.New("client: MaxInFlight must be positive")
	}
	if o.retries < 0 {
		o.retries = 0
	}
	return &Producer{c: c, opt: o, window: make(chan struct{}, o.maxInFlight),
		topics: make(map[string]*pubTopic), quit: make(chan struct{})}, nil
}

// Publish loads the topic's brokers and partitions and watches them (see
// Producers in broker/wire/doc.go). Send calls it on first use of a topic.
func (p *Producer) Publish(ctx context.Context, topic string) error {
	_, err := p.topology(ctx, topic)
	return err
}

func (p *Producer) topology(ctx context.Context, topic string) (pubTopology, error) {
	p.mu.Lock()
	pt := p.topics[topic]
	if pt == nil {
		pt = &pubTopic{ready: make(chan struct{})}
		p.topics[topic] = pt
		p.mu.Unlock()
		t, err := p.c.pubTopology(ctx, topic, true)
		pt.mu.Lock()
		pt.t, pt.err = t, err
		pt.mu.Unlock()
		close(pt.ready)
		if err == nil && t.watch != nil {
			p.watchTopic(topic, pt, t.watch)
		}
		if err != nil {
			p.mu.Lock()
			delete(p.topics, topic) // try again on the next send
			p.mu.Unlock()
		}
	} else {
		p.mu.Unlock()
	}
	select {
	case <-pt.ready:
	case <-ctx.Done():
		return pubTopology{}, ctx.Err()
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.t, pt.err
}

// watchTopic reloads the topic on every change of topics-pub/<topic>.
func (p *Producer) watchTopic(topic string, pt *pubTopic, watch <-chan struct{}) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case <-p.quit:
				return
			case <-watch:
			}
			for {
				ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.RequestTimeout)
				t, err := p.c.pubTopology(ctx, topic, true)
				cancel()
				if err == nil {
					pt.mu.Lock()
					pt.t = t
					pt.mu.Unlock()
					p.c.log.Info("TOPIC("+topic+"): producer partitions changed", "partitions", len(t.partitions))
					watch = t.watch
					break
				}
				p.c.log.Warn("TOPIC("+topic+"): reload failed", "err", err)
				select {
				case <-p.quit:
					return
				case <-time.After(time.Second):
				}
			}
		}
	}()
}

// refresh reloads a topic's topology after a connection failure, in case
// the master moved and the watch has not fired yet.
func (p *Producer) refresh(ctx context.Context, topic string) {
	p.mu.Lock()
	pt := p.topics[topic]
	p.mu.Unlock()
	if pt == nil {
		return
	}
	select {
	case <-pt.ready:
	default:
		return
	}
	t, err := p.c.pubTopology(ctx, topic, false)
	if err != nil {
		return
	}
	pt.mu.Lock()
	t.watch = pt.t.watch
	pt.t = t
	pt.mu.Unlock()
}

// Send sends one message and waits for the broker's answer. A failure
// returns the error of the last try; a StatusError carries the broker's code
// and text.
func (p *Producer) Send(ctx context.Context, m *Message) (SendResult, error) {
	if p.closing.Load() {
		return SendResult{}, ErrClosed
	}
	cl, part, err := p.start(ctx, m)
	return p.finish(ctx, m, cl, part, err)
}

// SendAsync sends one message and calls cb with the result from another
// goroutine. It blocks only while the in-flight window is full; it returns
// an error (and does not call cb) if ctx ends or the producer is closed
// before the message is taken. Messages passed to SendAsync one after the
// other are written in that order; a retried message can land after later
// ones, so use Send when a key's order must hold across failures.
// ctx also bounds the wait for the answer. m must not change until cb runs.
func (p *Producer) SendAsync(ctx context.Context, m *Message, cb func(SendResult, error)) error {
	if p.closing.Load() {
		return ErrClosed
	}
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.inflight.Add(1)
	cl, part, err := p.start(ctx, m)
	go func() {
		defer p.inflight.Done()
		r, err := p.finish(ctx, m, cl, part, err)
		<-p.window
		if cb != nil {
			cb(r, err)
		}
	}()
	return nil
}

// Flush waits until every SendAsync callback has run or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { p.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start picks a partition and writes the put; it does not wait.
func (p *Producer) start(ctx context.Context, m *Message) (*call, Partition, error) {
	if m.Topic == "" {
		return nil, Partition{}, errors.New("client: message has no topic")
	}
	t, err := p.topology(ctx, m.Topic)
	if err != nil {
		return nil, Partition{}, err
	}
	if len(t.partitions) == 0 {
		return nil, Partition{}, fmt.Errorf("%w for topic %s", ErrNoPartition, m.Topic)
	}
	part, err := p.opt.selector.Select(m.Topic, t.partitions, m)
	if err != nil {
		return nil, part, err
	}
	addr, ok := t.masters[part.BrokerID]
	if !ok {
		return nil, part, fmt.Errorf("%w: no master for broker %d", ErrNoPartition, part.BrokerID)
	}
	body, flag := encodeBody(m)
	sum := checksum(body)
	conn, err := p.c.pool.get(ctx, addr)
	if err != nil {
		return nil, part, err
	}
	cl, err := conn.start(ctx, func(dst []byte, op int32) []byte {
		return p.c.pool.codec.appendPut(dst, m.Topic, part.Partition, body, flag, sum, op)
	})
	return cl, part, err
}

// finish waits for the answer of a started put and retries retriable
// failures.
func (p *Producer) finish(ctx context.Context, m *Message, cl *call, part Partition, err error) (SendResult, error) {
	wait := backoff.Backoff{Min: p.opt.backoff, Max: max(p.opt.backoff, 5*time.Second)}
	for attempt := 0; ; attempt++ {
		var r SendResult
		if err == nil {
			r, err = p.await(ctx, cl, part)
			if err == nil {
				return r, nil
			}
		}
		if !retriableSend(err) || attempt >= p.opt.retries || p.closing.Load() {
			return SendResult{}, fmt.Errorf("client: send to %s: %w", m.Topic, err)
		}
		var ce *ConnError
		if errors.As(err, &ce) {
			p.refresh(ctx, m.Topic)
		}
		select {
		case <-time.After(wait.Next()):
		case <-ctx.Done():
			return SendResult{}, fmt.Errorf("client: send to %s: %w (last error: %v)", m.Topic, ctx.Err(), err)
		}
		cl, part, err = p.start(ctx, m)
	}
}

// retriableSend adds to Retriable the failures that happen before anything
// is written: no partition or no master yet.
func retriableSend(err error) bool {
	return Retriable(err) || errors.Is(err, ErrNoPartition)
}

func (p *Producer) await(ctx context.Context, cl *call, part Partition) (SendResult, error) {
	wctx, cancel := p.c.withTimeout(ctx)
	defer cancel()
	f, err := cl.wait(wctx)
	if err != nil {
		return SendResult{}, err
	}
	if f.value || f.code != 200 {
		return SendResult{}, &StatusError{Code: f.code, Text: string(f.body), Addr: cl.c.addr}
	}
	fs := strings.Split(strings.TrimSpace(string(f.body)), " ")
	local := len(fs) == 4 && fs[3] == "accepted-locally"
	if len(fs) != 3 && !local {
		return SendResult{}, fmt.Errorf("client: bad put answer %q", f.body)
	}
	id, err1 := strconv.ParseInt(fs[0], 10, 64)
	pn, err2 := strconv.Atoi(fs[1])
	off, err3 := strconv.ParseInt(fs[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return SendResult{}, fmt.Errorf("client: bad put answer %q", f.body)
	}
	return SendResult{ID: id, Partition: Partition{BrokerID: part.BrokerID, Partition: pn}, Offset: off, AcceptedLocally: local}, nil
}

// Close waits for async sends to finish (or ctx to end) and stops the
// topic watchers. It does not close the Client.
func (p *Producer) Close(ctx context.Context) error {
	if !p.closing.CompareAndSwap(false, true) {
		return nil
	}
	err := p.Flush(ctx)
	close(p.quit)
	p.wg.Wait()
	return err
}
