package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"gopkg.in/ini.v1"

	"metaq/broker"
	"metaq/broker/config"
)

// Component names, used in logs, /status and to find a component from another.
const (
	compTxn       = "transactions"
	compShipper   = "replication-master"
	compReceiver  = "replication-slave"
	compConfig    = "configsync"
	compTopology  = "topology"
	compDashboard = "dashboard"
)

// findComp returns the bundle's component of type T, if it runs one. It
// reads b.comps, which is set before any component starts and not changed
// afterwards, so components may call it from Start and later.
func findComp[T Component](b *Bundle) (T, bool) {
	for _, c := range b.comps {
		if t, ok := c.(T); ok {
			return t, true
		}
	}
	var zero T
	return zero, false
}

// configKeys records which sections and keys the operator wrote in
// server.ini and its overlay. The typed config fills defaults for every
// optional section, so "is this feature configured" needs the files
// themselves.
type configKeys map[string]map[string]bool

// readConfigKeys reads the section and key names of cfg's file and of its
// overlay. Unreadable files give an empty set: the loader already accepted
// them, so this can only happen when they changed on disk meanwhile.
func readConfigKeys(cfg *config.Server) configKeys {
	ck := configKeys{}
	add := func(data []byte) {
		f, err := ini.LoadSources(ini.LoadOptions{
			IgnoreInlineComment:        true, // `6#3` and `a;b` are values, not comments
			AllowShadows:               true,
			SkipUnrecognizableLines:    true,
			AllowPythonMultilineValues: false,
		}, data)
		if err != nil {
			return
		}
		for _, s := range f.Sections() {
			name := strings.ToLower(s.Name())
			if name == ini.DefaultSection && len(s.Keys()) == 0 {
				continue
			}
			if ck[name] == nil {
				ck[name] = map[string]bool{}
			}
			for _, k := range s.KeyStrings() {
				ck[name][k] = true
			}
		}
	}
	raw := cfg.Raw
	if raw == nil && cfg.File != "" {
		raw, _ = os.ReadFile(cfg.File)
	}
	add(raw)
	if ov := cfg.Site.Overlay; ov != "" {
		if !filepath.IsAbs(ov) && cfg.File != "" {
			ov = filepath.Join(filepath.Dir(cfg.File), ov)
		}
		if data, err := os.ReadFile(ov); err == nil {
			add(data)
		}
	}
	return ck
}

// has reports whether the section was written (with or without keys).
func (ck configKeys) has(section string) bool {
	_, ok := ck[strings.ToLower(section)]
	return ok
}

// hasKey reports whether section.key was written.
func (ck configKeys) hasKey(section, key string) bool {
	return ck[strings.ToLower(section)][key]
}

// shipperEnabled: the master side of replication runs on every master
// bundle unless [replication] enable=false, so a MetaQ server.ini with no
// [replication] section ships to slave sites too.
func (b *Bundle) shipperEnabled(configKeys) bool {
	return b.opts.Mode == ModeMaster && b.Config().Replication.Enable
}

// slaveStats returns what the broker answers `stats slave` from: the
// replication component's lines on an async slave or on a master that ships
// to slaves, nil otherwise (the item then falls through to a topic, as on
// MetaQ).
func (b *Bundle) slaveStats() broker.SlaveStats {
	if b.opts.Mode == ModeSlave || b.shipperEnabled(readConfigKeys(b.Config())) {
		b.slave.isSlave.Store(b.opts.Mode == ModeSlave)
		return &b.slave
	}
	return nil
}

// slaveStatsHolder lets the broker, which starts before the components,
// answer `stats slave` from the replication component once it runs.
type slaveStatsHolder struct {
	isSlave atomic.Bool // changes with a promotion or a demotion
	lines   atomic.Pointer[func() []string]
}

func (h *slaveStatsHolder) IsSlave() bool { return h.isSlave.Load() }

func (h *slaveStatsHolder) Lines() []string {
	if f := h.lines.Load(); f != nil {
		return (*f)()
	}
	return []string{"replication not running"}
}

func (h *slaveStatsHolder) set(f func() []string) {
	if f == nil {
		h.lines.Store(nil)
		return
	}
	h.lines.Store(&f)
}
