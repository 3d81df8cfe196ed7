package configsync

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"metaq/broker/registry"
)

// natsDir is where bundles record, in their ZooKeeper root, the NATS servers
// their agents use, so that `configsync push` finds them from a file whose
// [nats] section names none.
func natsDir(root string) string { return root + "/configsync/nats" }

// RecordNATS writes url under <root>/configsync/nats/<name> (persistent: the
// NATS servers outlive a stopped bundle). name is unique per bundle, e.g.
// "hf-1-s1".
func RecordNATS(ctx context.Context, reg *registry.Registry, name, url string) error {
	if err := reg.SetPersistent(ctx, natsDir(reg.Paths().Root)+"/"+name, []byte(url)); err != nil {
		return fmt.Errorf("configsync: record NATS url in ZooKeeper: %w", err)
	}
	return nil
}

// ForgetNATS removes the record RecordNATS wrote under name (a bundle whose
// role changed records itself under its new name); a missing one is not an
// error.
func ForgetNATS(ctx context.Context, reg *registry.Registry, name string) error {
	if err := reg.Delete(ctx, natsDir(reg.Paths().Root)+"/"+name); err != nil && !errors.Is(err, registry.ErrNoNode) {
		return fmt.Errorf("configsync: forget NATS record %s: %w", name, err)
	}
	return nil
}

// RecordedNATS returns the distinct NATS urls bundles recorded under reg's
// root, comma-joined (the form nats.Connect takes), "" when there are none.
func RecordedNATS(ctx context.Context, reg *registry.Registry) (string, error) {
	dir := natsDir(reg.Paths().Root)
	names, err := reg.Children(ctx, dir)
	if errors.Is(err, registry.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("configsync: read %s: %w", dir, err)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	var urls []string
	for _, n := range names {
		b, _, err := reg.Get(ctx, dir+"/"+n)
		if err != nil {
			continue
		}
		for u := range strings.SplitSeq(string(b), ",") {
			if u = strings.TrimSpace(u); u != "" && !seen[u] {
				seen[u] = true
				urls = append(urls, u)
			}
		}
	}
	return strings.Join(urls, ","), nil
}
