package bundle

import (
	"context"
	"strconv"
	"sync"
	"time"

	"metaq/broker/config"
	"metaq/configsync"
)

// configSyncComponent runs the configsync agent of this site: it applies
// pushed server.ini versions through Bundle.Reload. With no [nats] url, the
// master bundle (or a bundle whose [nats] embeddedListen is set) runs an
// embedded NATS server with JetStream that the other bundles on this
// machine point their [nats] url at. It runs when the configuration has a
// [nats] section.
type configSyncComponent struct {
	mu       sync.Mutex
	agent    *configsync.Agent
	embedded *configsync.EmbeddedNATS
}

func newConfigSyncComponent() *configSyncComponent { return &configSyncComponent{} }

func (c *configSyncComponent) Name() string { return compConfig }

// embedsNATS reports whether this bundle runs the embedded NATS server.
func embedsNATS(b *Bundle) bool {
	cfg := b.Config()
	return cfg.NATS.URL == "" && (b.opts.Mode == ModeMaster || cfg.NATS.EmbeddedListenSet)
}

// configSyncOwnsConfig reports whether configsync writes this bundle's
// server.ini. Then autoSyncMasterConfig is ignored: two writers of the file
// would undo each other's versions, and configsync's are versioned,
// validated with the overlay and reported per site.
func configSyncOwnsConfig(b *Bundle) bool {
	_, ok := findComp[*configSyncComponent](b)
	return ok
}

func (c *configSyncComponent) Start(ctx context.Context, b *Bundle) error {
	cfg := b.Config()
	log := b.Logger().With("component", "configsync")
	if b.Slave != nil && b.Slave.AutoSyncMasterConfig {
		b.Logger().Warn("REPLICATION: autoSyncMasterConfig=true is ignored: configsync owns server.ini on this bundle "+
			"(its configuration has a [nats] section); set autoSyncMasterConfig=false, or remove [nats] to copy the master's file instead",
			"slaveConfig", b.opts.PluginPath)
	}
	url := cfg.NATS.URL
	if embedsNATS(b) {
		eo := configsync.EmbeddedOptionsFor(cfg, log)
		e, err := configsync.StartEmbeddedNATS(eo)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.embedded = e
		c.mu.Unlock()
		url = e.ClientURL()
		log.Info("CONFIGSYNC: embedded NATS running", "url", url)
	} else if url == "" {
		url = configsync.ServerURL(cfg)
		log.Warn("CONFIGSYNC: no [nats] url on a slave bundle; using the embedded address", "url", url)
	}
	agent, err := configsync.NewAgent(configsync.Options{
		ConfigPath: b.opts.ConfigPath,
		URL:        url,
		Reloader:   bundleReloader{b},
		Logger:     log,
	})
	if err != nil {
		c.closeEmbedded()
		return err
	}
	if err := agent.Start(ctx); err != nil {
		c.closeEmbedded()
		return err
	}
	c.mu.Lock()
	c.agent = agent
	c.mu.Unlock()
	if b.Registry != nil {
		// So that `configsync push` finds the servers from the deployment's
		// ZooKeeper when the pushed file names none.
		name := cfg.Site.Name + "-" + strconv.Itoa(cfg.System.BrokerID) + "-m"
		if b.Slave != nil {
			name = cfg.Site.Name + "-" + strconv.Itoa(cfg.System.BrokerID) + "-s" + strconv.Itoa(b.Slave.SlaveID)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := configsync.RecordNATS(rctx, b.Registry, name, url); err != nil {
			log.Warn("CONFIGSYNC: cannot record the NATS url in ZooKeeper", "err", err)
		}
		cancel()
	}
	return nil
}

// bundleReloader applies a pushed version through Bundle.Reload and counts
// the site's messages per topic for configsync's topic-removal guard.
type bundleReloader struct{ b *Bundle }

// Reload re-reads the file the agent wrote, with this site's overlay,
// exactly as a SIGHUP would.
func (r bundleReloader) Reload(ctx context.Context, _ *config.Server) (config.Changes, error) {
	return r.b.Reload(ctx)
}

// TopicMessages counts the stored messages of every topic the running
// configuration serves.
func (r bundleReloader) TopicMessages() map[string]int64 {
	cfg := r.b.Config()
	out := map[string]int64{}
	for _, p := range r.b.Store.Partitions() {
		if _, ok := cfg.TopicFor(p.Topic); ok {
			out[p.Topic] += p.Messages
		}
	}
	return out
}

// Agent returns the running agent (nil before Start or after Close).
func (c *configSyncComponent) Agent() *configsync.Agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.agent
}

// NATSURL is the embedded server's client URL, "" when this bundle runs none.
func (c *configSyncComponent) NATSURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.embedded == nil {
		return ""
	}
	return c.embedded.ClientURL()
}

func (c *configSyncComponent) closeEmbedded() {
	c.mu.Lock()
	e := c.embedded
	c.embedded = nil
	c.mu.Unlock()
	if e != nil {
		e.Close()
	}
}

// Close stops the agent, then the embedded server it may be connected to.
func (c *configSyncComponent) Close() error {
	c.mu.Lock()
	a := c.agent
	c.agent = nil
	c.mu.Unlock()
	var err error
	if a != nil {
		err = a.Close()
	}
	c.closeEmbedded()
	return err
}

// Status is the site state the agent last recorded.
func (c *configSyncComponent) Status() any {
	a := c.Agent()
	if a == nil {
		return map[string]any{"running": false}
	}
	return map[string]any{"running": true, "embeddedNats": c.NATSURL(), "state": a.State()}
}
