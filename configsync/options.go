package configsync

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"metaq/broker/config"
)

// Options configures an Agent. Zero values mean "use the default".
type Options struct {
	// ConfigPath is the server.ini the site runs. Required. Pushed versions
	// are written here; previous versions are kept next to it as
	// <ConfigPath>.v<N> (or <ConfigPath>.prev when the version is unknown).
	ConfigPath string
	// Running is the configuration the process started with (overlay
	// applied). It is the baseline for "pending restart". Default: parsed
	// from ConfigPath and the overlay when the agent is created.
	Running *config.Server
	// OverlayPath is the site's overlay file (see the package documentation).
	// Default: Running.Site.Overlay, relative to ConfigPath's directory;
	// "" means no overlay.
	OverlayPath string
	// Site is this site's name: a NATS subject token and part of the KV key.
	// Default: Running.Site.Name.
	Site string
	// NATS holds the bucket, subject prefix, credentials file and TLS files.
	// Default: Running.NATS. Bucket defaults to "metaq_config", Subject to
	// "metaq.config".
	NATS config.NATS
	// URL is the NATS server to connect to. Default ServerURL(Running): [nats]
	// url, or the embedded server on 127.0.0.1:<serverPort+4>.
	URL string
	// Conn is an existing connection to use instead of dialling URL. The
	// agent does not close it.
	Conn *nats.Conn
	// Reloader applies a new configuration to the running broker. Required.
	Reloader Reloader
	// KeepVersions is how many previous server.ini versions are kept on
	// disk. Default 5.
	KeepVersions int
	// HeartbeatInterval is how often the site state is re-recorded in the
	// bucket so status can tell a live site from a silent one. Default 10s.
	HeartbeatInterval time.Duration
	// ReloadTimeout bounds one Reloader call. Default 30s.
	ReloadTimeout time.Duration
	// Logger receives state changes (version applied, apply failed). Nil
	// discards.
	Logger *slog.Logger
}

// validate fills defaults and checks the options; it parses the running
// configuration from disk when Running is nil.
func (o *Options) validate() error {
	if o.ConfigPath == "" {
		return errors.New("configsync: agent: ConfigPath is required")
	}
	if o.Reloader == nil {
		return errors.New("configsync: agent: Reloader is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.KeepVersions <= 0 {
		o.KeepVersions = 5
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = 10 * time.Second
	}
	if o.ReloadTimeout <= 0 {
		o.ReloadTimeout = 30 * time.Second
	}
	if o.Running == nil {
		data, err := os.ReadFile(o.ConfigPath)
		if err != nil {
			return fmt.Errorf("configsync: agent: %w", err)
		}
		// The shared file alone may lack what the overlay supplies (brokerId
		// is the overlay's in deploy/): only look up the overlay's name in it.
		if o.OverlayPath == "" {
			o.OverlayPath = resolveOverlay(o.ConfigPath, siteOverlayName(data))
		}
		var ov []byte
		if o.OverlayPath != "" {
			if ov, err = os.ReadFile(o.OverlayPath); err != nil {
				return fmt.Errorf("configsync: agent: overlay: %w", err)
			}
		}
		o.Running, _, err = config.ParseWithOverlay(o.ConfigPath, data, o.OverlayPath, ov)
		if err != nil {
			return fmt.Errorf("configsync: agent: %w", err)
		}
	}
	if o.OverlayPath == "" {
		o.OverlayPath = resolveOverlay(o.ConfigPath, o.Running.Site.Overlay)
	}
	if o.Site == "" {
		o.Site = o.Running.NATS.Agent
	}
	if o.Site == "" {
		o.Site = o.Running.Site.Name
	}
	if err := ValidSite(o.Site); err != nil {
		return err
	}
	if o.NATS == (config.NATS{}) {
		o.NATS = o.Running.NATS
	}
	o.NATS.Bucket = bucketName(o.NATS)
	o.NATS.Subject = subjectPrefix(o.NATS)
	if o.URL == "" && o.Conn == nil {
		if o.NATS.URL != "" {
			o.URL = o.NATS.URL
		} else {
			o.URL = ServerURL(o.Running)
		}
	}
	return nil
}

// resolveOverlay makes a relative overlay path relative to the directory of
// server.ini, so the same [site] overlay=... works wherever the bundle runs.
func resolveOverlay(configPath, overlay string) string {
	if overlay == "" || filepath.IsAbs(overlay) {
		return overlay
	}
	return filepath.Join(filepath.Dir(configPath), overlay)
}
