package configsync

import (
	"context"
	"errors"
	"log/slog"

	"metaq/broker/config"
)

// BundleOptions is what a broker bundle passes to StartBundle.
type BundleOptions struct {
	// ConfigPath is the server.ini the bundle loaded. Required.
	ConfigPath string
	// Config is the configuration the bundle runs (overlay applied). Required.
	Config *config.Server
	// Reloader applies a pushed configuration to the running broker. Required.
	Reloader Reloader
	// Logger receives configsync's and the embedded NATS server's logs.
	Logger *slog.Logger
	// Embedded overrides the embedded server's options; zero = the defaults
	// of EmbeddedOptionsFor(Config).
	Embedded EmbeddedOptions
}

// Bundle is configsync's part of a running bundle: the agent, plus the
// embedded NATS server when [nats] url is empty.
type Bundle struct {
	Agent    *Agent
	Embedded *EmbeddedNATS // nil when an external NATS is configured
}

// StartBundle starts configsync inside a bundle: an embedded NATS server
// with JetStream when Config has no [nats] url (single-machine deployments),
// then the site's agent connected to it or to the configured servers. Close
// stops both in the right order.
func StartBundle(ctx context.Context, o BundleOptions) (*Bundle, error) {
	if o.Config == nil {
		return nil, errors.New("configsync: bundle: Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Bundle{}
	url := o.Config.NATS.URL
	if url == "" {
		eo := EmbeddedOptionsFor(o.Config, o.Logger)
		if o.Embedded.Listen != "" {
			eo.Listen = o.Embedded.Listen
		}
		if o.Embedded.StoreDir != "" {
			eo.StoreDir = o.Embedded.StoreDir
		}
		if o.Embedded.ReadyTimeout > 0 {
			eo.ReadyTimeout = o.Embedded.ReadyTimeout
		}
		if o.Embedded.Logger != nil {
			eo.Logger = o.Embedded.Logger
		}
		e, err := StartEmbeddedNATS(eo)
		if err != nil {
			return nil, err
		}
		b.Embedded = e
		// The real address: the configured port may be 0 (pick a free one).
		url = e.ClientURL()
	}
	a, err := NewAgent(Options{ConfigPath: o.ConfigPath, Running: o.Config, URL: url, Reloader: o.Reloader,
		Logger: o.Logger.With("component", "configsync")})
	if err == nil {
		err = a.Start(ctx)
	}
	if err != nil {
		if b.Embedded != nil {
			b.Embedded.Close()
		}
		return nil, err
	}
	b.Agent = a
	return b, nil
}

// Close stops the agent (draining its connection), then the embedded
// server. It is safe to call more than once.
func (b *Bundle) Close() error {
	if b.Agent != nil {
		b.Agent.Close()
	}
	if b.Embedded != nil {
		b.Embedded.Close()
	}
	return nil
}
