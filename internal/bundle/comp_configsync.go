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
	url      string // the NATS url the agent uses
	recorded string // the name its url is recorded under in ZooKeeper ("" = none)
}

func newConfigSyncComponent() *configSyncComponent { return &configSyncComponent{} }

func (c *configSyncComponent) Name() string { return compConfig }

// embedsNATS reports whether this bundle runs the embedded NATS server:
// with no [nats] url, one started as master by its command line, or any
// bundle whose [nats] embeddedListen is set.
//
// Decided: the embedded server follows the host's configuration, not the
// site's role. It holds the configsync bucket (every version pushed) and
// the other sites' [nats] url points at it, so a failover neither moves it
// at run time nor at the next restart (a former master restarted as a
// slave by the role it recorded still serves it; a promoted site restarted
// as master does not start a second, empty one). While its host is down,
// configsync waits for it; a deployment that must push during a site's
// loss runs NATS of its own (deploy/nats, [nats] url).
func embedsNATS(b *Bundle) bool {
	cfg := b.Config()
	return cfg.NATS.URL == "" && (b.commandMode == ModeMaster || cfg.NATS.EmbeddedListenSet)
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
	c.agent, c.url = agent, url
	c.mu.Unlock()
	c.recordNATS(ctx, b)
	return nil
}

// natsRecordName names this bundle's NATS record after its role now:
// <site>-<brokerId>-m on a master, -s<slaveId> on a slave (after a
// failover, the role the site took, not the one it started with).
func natsRecordName(b *Bundle) string {
	cfg := b.Config()
	name := cfg.Site.Name + "-" + strconv.Itoa(cfg.System.BrokerID)
	if sl := b.SlaveConfig(); sl != nil {
		return name + "-s" + strconv.Itoa(sl.SlaveID)
	}
	return name + "-m"
}

// recordNATS records the agent's NATS url in ZooKeeper under the name of
// this bundle's role now (so that `configsync push` finds the servers from
// the deployment's ZooKeeper when the pushed file names none), and removes
// the record of the name it had before a role change.
func (c *configSyncComponent) recordNATS(ctx context.Context, b *Bundle) {
	if b.Registry == nil {
		return
	}
	name := natsRecordName(b)
	c.mu.Lock()
	url, old := c.url, c.recorded
	c.mu.Unlock()
	if url == "" || name == old {
		return
	}
	log := b.Logger().With("component", "configsync")
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := configsync.RecordNATS(rctx, b.Registry, name, url); err != nil {
		log.Warn("CONFIGSYNC: cannot record the NATS url in ZooKeeper", "name", name, "err", err)
		return
	}
	c.mu.Lock()
	c.recorded = name
	c.mu.Unlock()
	if old != "" {
		if err := configsync.ForgetNATS(rctx, b.Registry, old); err != nil {
			log.Warn("CONFIGSYNC: cannot remove the NATS record of the former role", "name", old, "err", err)
		}
		log.Info("CONFIGSYNC: NATS record follows the role", "was", old, "now", name)
	}
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

// followRoleInNATSRecord renames this bundle's NATS record in ZooKeeper
// (configSyncComponent.recordNATS) at every change of role, until ctx ends.
func (b *Bundle) followRoleInNATSRecord(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.RoleChanged():
		}
		if c, ok := findComp[*configSyncComponent](b); ok {
			c.recordNATS(ctx, b)
		}
	}
}
