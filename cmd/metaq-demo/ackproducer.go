package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"metaq/broker/client"
)

// ack is one message the failover producer had acknowledged.
type ack struct {
	seq  int
	site string
	at   time.Time
}

// ackProducer sends numbered messages, one at a time, to whichever site
// takes puts: ZooKeeper is off in the demo, so it is given every site's
// MetaQ address and moves on when its current site refuses or is gone
// (a client that follows ZooKeeper finds the new master there instead).
// It keeps every acknowledgement, to check afterwards that none was lost.
type ackProducer struct {
	topic string
	order []string          // sites in the order they are tried
	addrs map[string]string // site -> MetaQ address

	// runner sends until ctx ends, recording acknowledgements with
	// record: run in this process, or a child process in a namespace that
	// reports them.
	runner func(ctx context.Context)
	// onAck, when set, is called with each acknowledgement recorded.
	onAck func(ack)

	mu      sync.Mutex
	acks    []ack
	next    int    // sequence number of the next message
	current string // the site the last message went to
	cancel  context.CancelFunc
	done    chan struct{}
}

func newAckProducer(topic string, order []string, addrs map[string]string) *ackProducer {
	p := &ackProducer{topic: topic, order: order, addrs: addrs, current: order[0]}
	p.runner = p.run
	return p
}

// position is the next sequence number and the site last sent to.
func (p *ackProducer) position() (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next, p.current
}

// setPosition continues from sequence number next at site.
func (p *ackProducer) setPosition(next int, site string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next, p.current = next, site
}

// record notes that message seq was acknowledged by site at at.
func (p *ackProducer) record(a ack) {
	p.mu.Lock()
	if a.seq != p.next {
		p.mu.Unlock()
		return // a report out of order (cannot happen: one message at a time)
	}
	p.acks = append(p.acks, a)
	p.next++
	p.current = a.site
	onAck := p.onAck
	p.mu.Unlock()
	if onAck != nil {
		onAck(a)
	}
}

// ackPayload is the body of message seq.
func ackPayload(seq int) string { return fmt.Sprintf(`{"failover":%d}`, seq) }

// start runs the producer until stop.
func (p *ackProducer) start(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	p.mu.Lock()
	p.cancel, p.done = cancel, make(chan struct{})
	done := p.done
	p.mu.Unlock()
	go func() {
		defer close(done)
		p.runner(ctx)
	}()
}

// stop ends the producer and waits for it; a message in flight is not
// counted as acknowledged.
func (p *ackProducer) stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel, p.done = nil, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (p *ackProducer) run(ctx context.Context) {
	producers := map[string]*client.Producer{}
	clients := map[string]*client.Client{}
	drop := func(site string) {
		if pr := producers[site]; pr != nil {
			pr.Close(context.Background())
		}
		if c := clients[site]; c != nil {
			c.Close()
		}
		delete(producers, site)
		delete(clients, site)
	}
	defer func() {
		for site := range clients {
			drop(site)
		}
	}()
	p.mu.Lock()
	site := p.current
	p.mu.Unlock()
	for ctx.Err() == nil {
		err := p.sendOne(ctx, site, producers, clients)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// Refused (a slave, a master handing over) or gone: a new
		// connection to the next site.
		drop(site)
		site = p.order[(indexOf(p.order, site)+1)%len(p.order)]
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sendOne sends the next message to site and records its acknowledgement.
func (p *ackProducer) sendOne(ctx context.Context, site string, producers map[string]*client.Producer, clients map[string]*client.Client) error {
	sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	pr := producers[site]
	if pr == nil {
		c, err := client.New(sctx, client.Config{Brokers: []string{p.addrs[site]}})
		if err != nil {
			return err
		}
		clients[site] = c
		if pr, err = client.NewProducer(c); err != nil {
			return err
		}
		producers[site] = pr
	}
	p.mu.Lock()
	seq := p.next
	p.mu.Unlock()
	if _, err := pr.Send(sctx, &client.Message{Topic: p.topic, Payload: []byte(ackPayload(seq))}); err != nil {
		return err
	}
	p.record(ack{seq: seq, site: site, at: time.Now()})
	return nil
}

// snapshot is every acknowledgement so far, in order.
func (p *ackProducer) snapshot() []ack {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ack(nil), p.acks...)
}

// waitAcks waits until at least n messages acknowledged by site after
// since, and returns the first of them.
func (p *ackProducer) waitAcks(ctx context.Context, site string, since time.Time, n int, timeout time.Duration) (ack, error) {
	var first ack
	err := waitFor(ctx, timeout, func() error {
		got := 0
		for _, a := range p.snapshot() {
			if a.site == site && !a.at.Before(since) {
				if got == 0 {
					first = a
				}
				got++
			}
		}
		if got < n {
			return fmt.Errorf("the producer has %d of %d acknowledgements from %s", got, n, site)
		}
		return nil
	})
	return first, err
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// longestGap is the longest time between two consecutive acknowledgements
// from the last one before since on: the write downtime a producer saw.
func longestGap(acks []ack, since time.Time) time.Duration {
	var gap time.Duration
	for i := 1; i < len(acks); i++ {
		if acks[i].at.Before(since) {
			continue
		}
		gap = max(gap, acks[i].at.Sub(acks[i-1].at))
	}
	return gap
}

// heldSeqs reads every message of topic from the broker at addr and
// returns the failover messages among them (by sequence number).
func heldSeqs(ctx context.Context, addr, topic string, partitions int) (map[int]bool, error) {
	c, err := client.New(ctx, client.Config{Brokers: []string{addr}})
	if err != nil {
		return nil, fmt.Errorf("demo: client: %w", err)
	}
	defer c.Close()
	held := map[int]bool{}
	for p := range partitions {
		part := client.Partition{BrokerID: 0, Partition: p}
		lo, err := c.NearestOffset(ctx, topic, "", part, 0, addr)
		if errors.Is(err, client.ErrNoStore) {
			continue
		}
		if err != nil {
			return nil, err
		}
		hi, err := c.NearestOffset(ctx, topic, "", part, math.MaxInt64, addr)
		if err != nil {
			return nil, err
		}
		for off := lo; off < hi; {
			r, err := c.Fetch(ctx, client.FetchRequest{Topic: topic, Partition: part, Offset: off, MaxSize: 1 << 20, Addr: addr})
			if err != nil {
				return nil, err
			}
			if r.Status != 200 || r.NextOffset <= off {
				return nil, fmt.Errorf("%s-%d at %d: status %d", topic, p, off, r.Status)
			}
			for _, m := range r.Messages {
				var seq int
				if _, err := fmt.Sscanf(string(m.Payload), `{"failover":%d}`, &seq); err == nil {
					held[seq] = true
				}
			}
			off = r.NextOffset
		}
	}
	return held, nil
}

// seqList prints sequence numbers compactly: 3-7,9.
func seqList(seqs []int) string {
	var parts []string
	for i := 0; i < len(seqs); {
		j := i
		for j+1 < len(seqs) && seqs[j+1] == seqs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(seqs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", seqs[i], seqs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
