package bundle

import (
	"context"

	"metaq/broker"
	"metaq/broker/registry"
)

// brokerRegistry adapts registry.Registry to the broker's Registry
// interface. It lives here rather than in broker/registry so that the
// registry does not import the broker (the broker's tests use fakes).
type brokerRegistry struct{ r *registry.Registry }

var _ broker.Registry = brokerRegistry{}

func (a brokerRegistry) RegisterBroker(ctx context.Context, bi broker.BrokerInfo) error {
	url := bi.URL
	if url == "" {
		url = a.r.URL()
	}
	return a.r.RegisterBrokerAs(ctx, url, bi.ConfigChecksum)
}

func (a brokerRegistry) RegisterTopic(ctx context.Context, t broker.TopicInfo) error {
	return a.r.RegisterTopic(ctx, t.Topic, t.NumPartitions, t.AcceptPublish, t.AcceptSubscribe)
}

// Unregister deletes the broker's nodes and waits zk.zkSyncTimeMs, as a
// clean MetaQ stop does.
func (a brokerRegistry) Unregister(ctx context.Context) error {
	return a.r.UnregisterAll(ctx)
}
