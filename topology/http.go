package topology

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// LagDocument is the JSON body of /lag, and what `metaq lag -json` prints.
type LagDocument struct {
	Time      time.Time           `json:"time"`
	Node      string              `json:"node"`
	Site      string              `json:"site"`
	Sites     map[string]string   `json:"sites"`
	Members   []Member            `json:"members"`
	Groups    []Report            `json:"slaveGroups"`
	Consumers []ConsumerLagReport `json:"consumerGroups"`
	// ConsumerError is set when consumer offsets could not be read.
	ConsumerError string `json:"consumerError,omitempty"`
	// ConsumerScope is ScopePool when Consumers are every broker id's, each
	// from its current master; "" when they are the answering bundle's own
	// (its broker id, while it is the master).
	ConsumerScope string `json:"consumerScope,omitempty"`
	// Gateway is the write gateway of the bundle that answered, when it
	// has one (a slave site's forwarding of puts to the master).
	Gateway *GatewayReport `json:"gateway,omitempty"`
}

// GatewayReport is a bundle's write gateway: what it did with the puts it
// forwarded to the master, and its store-and-forward outbox.
type GatewayReport struct {
	Forwarded    int64 `json:"forwarded"`    // answered with the master's answer
	NotSent      int64 `json:"notSent"`      // answered 503, never sent
	Unknown      int64 `json:"unknown"`      // answered 500, sent and no answer
	Retried      int64 `json:"retried"`      // sent again after the master moved
	Dials        int64 `json:"dials"`        // connections opened to the master
	Accepted     int64 `json:"accepted"`     // answered accepted-locally (in the outbox)
	Refused      int64 `json:"refused"`      // refused by the outbox (a bound, a write failure)
	Drained      int64 `json:"drained"`      // outbox entries confirmed stored at the master
	Deduplicated int64 `json:"deduplicated"` // outbox entries found at the master, not sent again
	// The bound on forwarded bytes awaiting the master's answers, all
	// producer connections together ([site] forwardMaxInFlightBytes).
	Full             int64 `json:"full"`             // answered 503: no room under the bound in time
	InFlightBytes    int64 `json:"inFlightBytes"`    // forwarded bodies awaiting the master's answers
	MaxInFlightBytes int64 `json:"maxInFlightBytes"` // forwardMaxInFlightBytes
	// Outbox is the store-and-forward outbox, when the gateway has one.
	Outbox *OutboxReport `json:"outbox,omitempty"`
}

// OutboxReport is a gateway's store-and-forward outbox.
type OutboxReport struct {
	Entries          int64   `json:"entries"`          // accepted, not yet confirmed by the master
	Bytes            int64   `json:"bytes"`            // their bytes in the outbox
	OldestAgeSeconds float64 `json:"oldestAgeSeconds"` // age of the oldest; 0 when empty
	MaxBytes         int64   `json:"maxBytes"`         // outboxMaxBytes
	MaxAgeSeconds    float64 `json:"maxAgeSeconds"`    // outboxMaxAgeMs, in seconds
	DrainError       string  `json:"drainError,omitempty"`
}

// Document builds the /lag body. offsets may be nil (no consumer lag).
func (t *Topology) Document(ctx context.Context, offsets OffsetSource) LagDocument {
	d := LagDocument{
		Time:    t.opts.Clock.Now().UTC(),
		Node:    t.opts.Name,
		Site:    t.opts.Site,
		Sites:   map[string]string{},
		Members: t.Members(),
		Groups:  t.Reports(),
	}
	for s, st := range t.Sites() {
		d.Sites[s] = map[MemberState]string{StateAlive: "up", StateSuspect: "suspect", StateDown: "down"}[st]
	}
	if offsets != nil {
		c, err := t.ConsumerLag(ctx, offsets)
		if err != nil {
			d.ConsumerError = err.Error()
		}
		d.Consumers = c
	}
	if d.Groups == nil {
		d.Groups = []Report{}
	}
	if d.Consumers == nil {
		d.Consumers = []ConsumerLagReport{}
	}
	return d
}

// Handler serves the lag document as JSON on GET, wherever it is mounted
// (the dashboard mounts it at /lag on dashboardHttpPort). offsets may be nil.
// Reading consumer offsets is bounded by a 5 s timeout.
func Handler(t *Topology, offsets OffsetSource) http.Handler {
	return NewLagHandler(t, LagHandlerOptions{Offsets: offsets})
}

// LagHandlerOptions configure NewLagHandler. Every field may be nil.
type LagHandlerOptions struct {
	// Offsets gives consumer offsets; nil lists no consumer groups.
	Offsets OffsetSource
	// Gateway gives the bundle's write gateway (or nil when it has none).
	Gateway func() *GatewayReport
	// Fetch asks another member for its own document. When set, the
	// consumer groups of every broker id are listed, each from its current
	// master (MergeConsumers), unless the request says ?scope=local (what
	// Fetch itself asks, so that masters do not ask each other in turn).
	Fetch LagFetcher
}

// NewLagHandler serves the lag document as JSON on GET. ?consumers=0 leaves
// consumer groups out; ?scope=local lists only this bundle's own. The
// document, the other masters' included, is bounded by a 5 s timeout.
func NewLagHandler(t *Topology, o LagHandlerOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		q := r.URL.Query()
		src := o.Offsets
		if q.Get("consumers") == "0" {
			src = nil
		}
		doc := t.Document(ctx, src)
		if src != nil && o.Fetch != nil && q.Get("scope") != "local" {
			MergeConsumers(ctx, &doc, o.Fetch)
		}
		if o.Gateway != nil {
			doc.Gateway = o.Gateway()
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
	})
}
