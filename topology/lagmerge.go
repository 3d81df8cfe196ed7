package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"

	"metaq/internal/hostaddr"
)

// ScopePool is LagDocument.ConsumerScope when the consumer groups are every
// broker id's, each from its current master (MergeConsumers).
const ScopePool = "pool"

// LagFetcher reads one member's own lag document: its consumer groups only,
// without the member asking others in turn.
type LagFetcher func(ctx context.Context, m Member) (LagDocument, error)

// MemberLagURL is the lag report of a member as another process dials it:
// its gossiped dashboard address, with the member's gossip host when that
// address is a wildcard bind (0.0.0.0, ::).
func MemberLagURL(scheme string, m Member, path string) string {
	gossipHost, _, _ := net.SplitHostPort(m.Addr)
	if scheme == "" {
		scheme = "http"
	}
	return scheme + "://" + hostaddr.Dialable(m.Meta.HTTPAddr, gossipHost) + path
}

// HTTPLagFetcher asks a member's dashboard for its own lag document
// (MemberLagURL with ?scope=local, so that it does not ask the others in
// turn), sending token as a bearer token when set.
func HTTPLagFetcher(client *http.Client, scheme, path, token string) LagFetcher {
	if client == nil {
		client = http.DefaultClient
	}
	return func(ctx context.Context, m Member) (LagDocument, error) {
		return fetchLag(ctx, client, MemberLagURL(scheme, m, path)+"?scope=local", token)
	}
}

func fetchLag(ctx context.Context, client *http.Client, url, token string) (LagDocument, error) {
	var doc LagDocument
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return doc, fmt.Errorf("topology: lag request %s: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return doc, fmt.Errorf("ask %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return doc, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("%s: %s", url, resp.Status)
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return doc, fmt.Errorf("%s did not return a lag report: %w", url, err)
	}
	return doc, nil
}

// MergeConsumers makes doc list the consumer groups of every broker id as its
// current master (CurrentMasters of doc.Members) reports them, once each:
// rows of the bundle that built doc stand for the ids it is the current
// master of, the others are fetched from each master. A bundle knows the
// master end offsets of its own broker id only, and only while it is its
// master, so a slave, or one master of several, lists nothing or only its
// own id without this. A master that cannot be asked is named in
// doc.ConsumerError. It reports whether doc changed.
func MergeConsumers(ctx context.Context, doc *LagDocument, fetch LagFetcher) bool {
	masters := CurrentMasters(doc.Members)
	if len(masters) == 0 {
		return false
	}
	ids := make([]int, 0, len(masters))
	for id := range masters {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var rows []ConsumerLagReport
	var problems []string
	if doc.ConsumerError != "" {
		problems = append(problems, doc.ConsumerError)
	}
	for _, c := range doc.Consumers {
		if m, ok := masters[c.BrokerID]; ok && m.Name == doc.Node {
			rows = append(rows, c)
		}
	}
	for _, id := range ids {
		m := masters[id]
		if m.Name == doc.Node {
			continue
		}
		if m.Meta.HTTPAddr == "" {
			problems = append(problems, fmt.Sprintf("broker %d: its master %s serves no dashboard", id, m.Name))
			continue
		}
		other, err := fetch(ctx, m)
		if err != nil {
			problems = append(problems, fmt.Sprintf("broker %d: its master %s: %v", id, m.Name, err))
			continue
		}
		if other.Node != "" && other.Node != m.Name {
			// Another bundle answered at that address: a master whose
			// dashboard listens on loopback, asked from another host.
			problems = append(problems, fmt.Sprintf("broker %d: its master %s: %s answered at %s (a loopback dashboardAddr?)",
				id, m.Name, other.Node, m.Meta.HTTPAddr))
			continue
		}
		if other.ConsumerError != "" {
			problems = append(problems, fmt.Sprintf("broker %d: its master %s: %s", id, m.Name, other.ConsumerError))
		}
		for _, c := range other.Consumers {
			if c.BrokerID == id {
				rows = append(rows, c)
			}
		}
	}
	type key struct {
		broker                   int
		site, root, group, topic string
	}
	seen := map[key]bool{}
	merged := make([]ConsumerLagReport, 0, len(rows))
	for _, c := range rows {
		k := key{c.BrokerID, c.Site, c.Root, c.Group, c.Topic}
		if !seen[k] {
			seen[k] = true
			merged = append(merged, c)
		}
	}
	sort.SliceStable(merged, func(i, j int) bool {
		a, b := merged[i], merged[j]
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Root != b.Root {
			return a.Root < b.Root
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.BrokerID < b.BrokerID
	})
	doc.Consumers = merged
	doc.ConsumerError = strings.Join(problems, "; ")
	doc.ConsumerScope = ScopePool
	return true
}
