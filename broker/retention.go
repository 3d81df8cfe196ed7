package broker

import (
	"sync"
	"time"

	"metaq/broker/config"
)

// retention runs one goroutine per distinct deleteWhen cron expression;
// at each activation it calls Store.Retain for every topic with data whose
// settings use that expression (see Retention in broker/wire/doc.go). reschedule replaces the set on
// Reload; stop ends them all.
type retention struct {
	b       *Broker
	mu      sync.Mutex
	quit    chan struct{}
	wg      sync.WaitGroup
	stopped bool
}

func newRetention(b *Broker) *retention { return &retention{b: b} }

func (r *retention) reschedule(cfg *config.Server) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if r.quit != nil {
		close(r.quit)
		r.wg.Wait()
	}
	r.quit = make(chan struct{})
	crons := map[string]config.Cron{}
	for _, tc := range cfg.Topics {
		if tc.DeleteWhen.Next != nil {
			crons[tc.DeleteWhen.Text] = tc.DeleteWhen
		}
	}
	if c := cfg.System.DeleteWhen; c.Next != nil {
		crons[c.Text] = c
	}
	for _, c := range crons {
		r.wg.Add(1)
		go r.run(c, r.quit)
	}
}

func (r *retention) run(c config.Cron, quit chan struct{}) {
	defer r.wg.Done()
	clk := r.b.opts.Clock
	for {
		now := clk.Now()
		next := c.Next(now)
		if next.IsZero() || !next.After(now) {
			r.b.log.Warn("RETENTION: deleteWhen never fires", "cron", c.Text)
			return
		}
		select {
		case <-quit:
			return
		case <-clk.After(next.Sub(now)):
		}
		r.runOnce(c.Text, clk.Now())
	}
}

// runOnce applies retention to every topic with data scheduled by cron.
func (r *retention) runOnce(cron string, now time.Time) {
	b := r.b
	seen := map[string]bool{}
	for _, p := range b.store.Partitions() {
		if seen[p.Topic] {
			continue
		}
		seen[p.Topic] = true
		// Data of a topic no section matches follows [system] settings.
		when := b.cfg.Load().System.DeleteWhen.Text
		tc, ok := b.topicFor(p.Topic)
		if ok {
			when = tc.DeleteWhen.Text
		}
		if when != cron {
			continue
		}
		n, err := b.store.Retain(p.Topic, now)
		if err != nil {
			b.log.Error("TOPIC("+p.Topic+"): retention failed", "err", err)
			continue
		}
		if n > 0 {
			b.log.Info("TOPIC("+p.Topic+"): retention removed segments", "segments", n, "policy", tc.DeletePolicy.Text)
		}
	}
}

func (r *retention) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.quit != nil {
		close(r.quit)
		r.quit = nil
	}
	r.wg.Wait()
}
