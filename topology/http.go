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
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		src := offsets
		if r.URL.Query().Get("consumers") == "0" {
			src = nil
		}
		doc := t.Document(ctx, src)
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(doc)
	})
}
