package faultsched

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"metaq/broker/client"
	"metaq/internal/clock"
)

// Outcomes of a put.
const (
	OutcomeOK      = "ok"      // acknowledged, with partition and offset
	OutcomeRefused = "refused" // answered with an error, or never sent: not stored
	OutcomeUnknown = "unknown" // sent, no answer: stored or not
)

// Op is one put of the workload and its outcome.
type Op struct {
	Client    string        `json:"client"`         // go-<site> (the Go client through that site's ZooKeeper) or raw-<n>
	Site      string        `json:"site,omitempty"` // the site a raw put was sent to
	Topic     string        `json:"topic"`
	Payload   string        `json:"payload"`
	Start     time.Duration `json:"start"`
	End       time.Duration `json:"end"`
	Outcome   string        `json:"outcome"`
	Partition int           `json:"partition"`
	Offset    int64         `json:"offset"`
	Err       string        `json:"err,omitempty"`
	// Gen is the generation the raw put's site had recorded before it was
	// sent and still had when it was answered, -1 when it changed between
	// the two or for the Go client (which does not say which site
	// answered), -3 when the site was a slave by its identity file or its
	// start command (a former master that handed over passes the puts that
	// reach it on to the new master and answers with its answer, and a
	// slave site's gateway forwards them: neither stores anything itself).
	Gen int64 `json:"gen"`
}

// Workload runs producers on both clients until stopped and records every
// put.
type Workload struct {
	L     *Layout
	Start time.Time
	Seed  uint64
	// Pause between two puts of one producer.
	Every time.Duration

	mu  sync.Mutex
	ops []Op
	wg  sync.WaitGroup
}

var workloadTopics = []struct {
	name  string
	parts int
}{{SyncTopic, syncParts}, {AsyncTopic, asyncParts}, {AsyncTopic2, async2Parts}}

func (w *Workload) add(op Op) {
	w.mu.Lock()
	w.ops = append(w.ops, op)
	w.mu.Unlock()
}

// Ops returns the history so far.
func (w *Workload) Ops() []Op {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Op(nil), w.ops...)
}

// Run starts the producers: a Go client producer through each site's
// ZooKeeper, and two raw-protocol producers that find the master by
// trying the sites in turn. They stop when ctx ends; Wait waits for them.
func (w *Workload) Run(ctx context.Context) {
	if w.Every == 0 {
		w.Every = 20 * time.Millisecond
	}
	for i, s := range Sites {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.goProducer(ctx, s, rand.New(rand.NewPCG(w.Seed, uint64(i))))
		}()
	}
	for i := range 2 {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.rawProducer(ctx, i, rand.New(rand.NewPCG(w.Seed, uint64(100+i))))
		}()
	}
}

// Wait waits for the producers to stop.
func (w *Workload) Wait() { w.wg.Wait() }

func (w *Workload) since() time.Duration { return time.Since(w.Start) }

func (w *Workload) goProducer(ctx context.Context, site string, rng *rand.Rand) {
	name := "go-" + site
	var (
		c *client.Client
		p *client.Producer
	)
	defer func() {
		if p != nil {
			p.Close(context.Background())
		}
		if c != nil {
			c.Close()
		}
	}()
	n := 0
	for ctx.Err() == nil {
		if p == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			c, err = client.New(cctx, w.goClientConfig(site))
			cancel()
			if err == nil {
				p, err = client.NewProducer(c, client.WithRetries(2), client.WithRetryBackoff(100*time.Millisecond))
			}
			if err != nil {
				if c != nil {
					c.Close()
					c = nil
				}
				if clock.Sleep(ctx, 500*time.Millisecond) != nil {
					return
				}
				continue
			}
		}
		n++
		t := workloadTopics[rng.IntN(len(workloadTopics))]
		op := Op{Client: name, Topic: t.name, Payload: fmt.Sprintf("%s-%d", name, n), Start: w.since(), Gen: -1}
		sctx, cancel := context.WithTimeout(ctx, 8*time.Second)
		res, err := p.Send(sctx, &client.Message{Topic: t.name, Payload: []byte(op.Payload)})
		cancel()
		op.End = w.since()
		if err == nil {
			op.Outcome, op.Partition, op.Offset = OutcomeOK, res.Partition.Partition, res.Offset
		} else {
			op.Err = err.Error()
			op.Outcome = goOutcome(err)
		}
		if ctx.Err() != nil && op.Outcome != OutcomeOK {
			op.Outcome = OutcomeUnknown // cut short by the end of the run
		}
		w.add(op)
		if clock.Sleep(ctx, w.Every) != nil {
			return
		}
	}
}

// goClientConfig is the configuration of the Go client that produces
// through the site's ZooKeeper: its session goes through the proxy in
// front of that ZooKeeper for the workload's clients, and its broker
// connections through dialBroker, so that a client-cut of the site holds
// both.
func (w *Workload) goClientConfig(site string) client.Config {
	return client.Config{ZKServers: []string{w.L.ClientZKAddr(site)}, ZKSyncTime: 200 * time.Millisecond,
		ZKSessionTimeout: 4 * time.Second, RequestTimeout: 5 * time.Second, DialTimeout: 2 * time.Second,
		Dial: w.dialBroker}
}

// dialBroker opens the Go client's connection to a broker through the
// proxy in front of that site's MetaQ port (ZooKeeper names the MetaQ
// port), so that a client-cut reaches it too.
func (w *Workload) dialBroker(ctx context.Context, network, addr string) (net.Conn, error) {
	for _, s := range Sites {
		if addr == w.L.MetaQAddr(s) {
			addr = w.L.ClientAddr(s)
			break
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// goOutcome classifies a Go client error: an answer or a request never
// written is a refusal; anything else may have been stored.
func goOutcome(err error) string {
	var se *client.StatusError
	var ce *client.ConnError
	switch {
	case errors.As(err, &se):
		return OutcomeRefused
	case errors.As(err, &ce) && !ce.Written:
		return OutcomeRefused
	case errors.Is(err, client.ErrNoPartition), errors.Is(err, client.ErrNoRoute):
		return OutcomeRefused
	}
	return OutcomeUnknown
}

// rawProducer sends each put to the site it believes is master, and after
// a refusal or an error tries the next site.
func (w *Workload) rawProducer(ctx context.Context, i int, rng *rand.Rand) {
	name := fmt.Sprintf("raw-%d", i)
	at := i % len(Sites)
	var rc *rawConn
	defer func() {
		if rc != nil {
			rc.Close()
		}
	}()
	n := 0
	for ctx.Err() == nil {
		site := Sites[at]
		n++
		t := workloadTopics[rng.IntN(len(workloadTopics))]
		part := rng.IntN(t.parts)
		op := Op{Client: name, Site: site, Topic: t.name, Payload: fmt.Sprintf("%s-%d", name, n), Start: w.since(), Partition: part, Gen: -1}
		genBefore := siteGeneration(w.L, site)
		var err error
		if rc == nil {
			rc, err = rawDial(w.L.ClientAddr(site), time.Second)
			if err != nil {
				rc = nil
				op.End, op.Outcome, op.Err = w.since(), OutcomeRefused, "dial: "+err.Error()
			} else {
				rc.to = 8 * time.Second
			}
		}
		if rc != nil {
			var p int
			var off int64
			p, off, err = rc.put(t.name, part, []byte(op.Payload))
			op.End = w.since()
			var st *rawStatus
			switch {
			case err == nil:
				op.Outcome, op.Partition, op.Offset = OutcomeOK, p, off
				if g := siteGeneration(w.L, site); g == genBefore {
					op.Gen = g
				}
			case errors.As(err, &st):
				op.Outcome, op.Err = OutcomeRefused, st.Error()
			default:
				op.Outcome, op.Err = OutcomeUnknown, err.Error()
				rc.Close()
				rc = nil
			}
		}
		w.add(op)
		if op.Outcome != OutcomeOK {
			if rc != nil {
				rc.Close()
				rc = nil
			}
			at = (at + 1) % len(Sites)
			if clock.Sleep(ctx, 100*time.Millisecond) != nil {
				return
			}
			continue
		}
		if clock.Sleep(ctx, w.Every) != nil {
			return
		}
	}
}

// siteGeneration is the generation the site recorded in its identity file
// (<dataPath>/replication/identity.json; 0 before any failover), -2 when
// it cannot be read (being rewritten), -3 when the site is a slave by what
// the file says (see Op.Gen): a slave role, a master role of an older
// generation than the one it follows now (a master that was superseded
// while it was down starts as the slave its command says and keeps that
// record), or no role at all at a site whose start command makes it a
// slave (its gateway answers puts it forwards to the master).
func siteGeneration(l *Layout, site string) int64 {
	startsAsSlave := site != Sites[0]
	b, err := os.ReadFile(filepath.Join(l.DataDir(site), "replication", "identity.json"))
	if errors.Is(err, os.ErrNotExist) {
		if startsAsSlave {
			return -3
		}
		return 0
	}
	var id struct {
		Generation int64 `json:"generation"`
		Role       *struct {
			Name       string `json:"name"`
			Generation int64  `json:"generation"`
		} `json:"role"`
	}
	if err != nil || json.Unmarshal(b, &id) != nil {
		return -2
	}
	switch {
	case id.Role == nil && startsAsSlave,
		id.Role != nil && id.Role.Name == "slave",
		id.Role != nil && id.Role.Generation < id.Generation:
		return -3
	}
	return id.Generation
}
