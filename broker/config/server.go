package config

import (
	"fmt"
	"hash/crc32"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// MetaQ's defaults (MetaConfig, TopicConfig, ZkUtils.ZKConfig field
// initialisers) and this project's defaults for its own sections.
const (
	DefaultServerPort                = 8123
	DefaultDashboardHTTPPort         = 8120
	DefaultNumPartitions             = 1
	DefaultUnflushThreshold          = 1000
	DefaultUnflushInterval           = 10 * time.Second
	DefaultMaxSegmentSize            = 1 << 30
	DefaultMaxTransferSize           = 1 << 20
	DefaultDeletePolicy              = "delete,168"
	DefaultDeleteWhen                = "0 0 6,18 * * ?"
	DefaultQuartzThreadCount         = 5
	DefaultMaxCheckpoints            = 3
	DefaultCheckpointInterval        = time.Hour
	DefaultMaxTxTimeoutTimerCapacity = 30000
	DefaultFlushTxLogAtCommit        = 1
	DefaultMaxTxTimeoutInSeconds     = 60
	DefaultZkConnect                 = "localhost:2181"
	DefaultZkSessionTimeout          = 30 * time.Second
	DefaultZkConnectionTimeout       = 30 * time.Second
	DefaultZkSyncTime                = 5 * time.Second
	DefaultZkRoot                    = "/meta"
	DefaultSiteName                  = "default"
	DefaultGossipProbeInterval       = time.Second // memberlist's LAN default
	DefaultNATSBucket                = "metaq_config"
	DefaultNATSSubject               = "metaq.config"
	DefaultCompression               = "zstd"
	DefaultStuckAfter                = 30 * time.Second
	DefaultLease                     = 4 * time.Second
	DefaultAutoFailoverAfter         = 30 * time.Second
	DefaultPromoteFinishTimeout      = 5 * time.Minute // promoteFinishTimeoutMs
	// MaxSites bounds [replication] sites (fenceSites has the same bound).
	MaxSites = 64
	// A put a master holds while it hands over waits at most this long
	// for the new master: below the 3 s MetaQ's Java producer waits for
	// an answer, so that no held put is answered after its client gave up.
	DefaultHandoverHold      = 2500 * time.Millisecond
	DefaultHandoverHoldBytes = 64 << 20
	DefaultHandoverHoldMax   = 2900 * time.Millisecond
	DefaultSlaveGroupPrefix  = "meta-slave-group"
	DefaultSlaveMaxDelay     = 500 * time.Millisecond

	// [limits]. Kafka's connections.max.idle.ms is 10 minutes; MetaQ's Java
	// client sends a heartbeat after 10 s without traffic, so a healthy
	// client is never idle for long.
	DefaultMaxConnections             = 10000
	DefaultMaxConnectionsPerAddress   = 1000
	DefaultIdleTimeout                = 10 * time.Minute
	DefaultReadTimeout                = time.Minute
	DefaultWriteTimeout               = 30 * time.Second
	DefaultMaxBufferedBytes           = 256 << 20
	DefaultMaxConnectionBufferedBytes = 32 << 20
	// A held get woken with less than getWaitMinBytes at its offset lingers
	// up to getWaitLingerMs for more. On by default (only where getWaitMs is
	// above 0): against the load generator 256 KiB more than halves the gets
	// per delivered message and cuts the broker's CPU per delivery (each
	// answer costs the socket a push of its own), for up to the linger of
	// put-to-delivery latency (broker/store/BENCH.md, issue 26).
	DefaultGetWaitMinBytes = 256 << 10
	DefaultGetWaitLinger   = 5 * time.Millisecond
	// The client listener's TCP congestion control. Not BBR (a common host
	// default): BBR paces every socket, and a get's answer of a few
	// segments then arms a pacing timer per segment, the largest part of
	// the kernel's cost per delivery against the load generator; set on the
	// listener because a connection switched after accept keeps pacing
	// (broker/store/BENCH.md, issue 26).
	DefaultTCPCongestion = "cubic"
	// MinConnectionBufferedBytes holds one record of the largest message
	// (16 MiB body plus its 20-byte header), so every record can be fetched.
	MinConnectionBufferedBytes = 16<<20 + 20
)

// Port offsets from serverPort for the listeners of the optional [gossip]
// and [nats] sections, used only when the section is written and gives no
// address. None is +1 or +2: MetaQ users run brokers on adjacent ports
// (MetaQ's own slave layout takes 8111, 8112 and 8113), the replication
// stream shares the MetaQ port itself, and the admin endpoint is a unix
// socket in the data directory unless [site] adminAddr asks for a port, so
// a file of MetaQ's takes no port MetaQ did not use.
const (
	gossipPortOffset = 3
	natsPortOffset   = 4
)

// maxBrokerID is the largest brokerId MetaQ accepts. The spec text of the
// project's issue says 0..1024, but MetaQ's IdWorker (message ids) takes a
// 10-bit worker id and refuses anything above 1023, so 0..1023 it is.
const maxBrokerID = 1023

// Load reads and validates a server.ini. When its [site] section names an
// overlay file (relative paths are taken from the directory of path), that
// file is read too and its keys win (see ParseWithOverlay). appClassPath
// defaults to <dir of path>/../provided/ when that directory exists, as in
// MetaQ. Nothing is created or written on disk.
//
// Warnings are returned even when err is nil; err is an ErrorList holding
// every bad value found.
func Load(path string) (*Server, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	var p problems
	base := readIni(path, data, &p)
	var overlayFile string
	var overlay *rawIni
	if base != nil {
		if site := base.section(sectionSite); site != nil {
			if k, ok := (sectionReader{sec: site, file: path}).raw("overlay"); ok {
				overlayFile = k.Value
				if !filepath.IsAbs(overlayFile) {
					overlayFile = filepath.Join(filepath.Dir(path), overlayFile)
				}
				odata, err := os.ReadFile(overlayFile)
				if err != nil {
					p.errorf(path, sectionSite, "overlay", k.Value, "a readable overlay file (%v)", err)
				} else {
					overlay = readIni(overlayFile, odata, &p)
				}
			}
		}
	}
	appClassPath := ""
	if dir := filepath.Join(filepath.Dir(path), "..", "provided"); isDir(dir) {
		if abs, err := filepath.Abs(dir); err == nil {
			appClassPath = abs + "/"
		}
	}
	return build(path, data, base, overlayFile, overlay, appClassPath, zkConnectBeside(path), &p)
}

// zkConnectFrom finds zk.zkConnect for a file whose [zookeeper] section
// leaves it unset: the value, the file it came from, and the files looked
// at. nil: nowhere to look (bytes parsed without a path).
type zkConnectFrom func() (value, file string, tried []string)

// zkConnectBeside looks where MetaQ's broker looks when its file sets no
// ZooKeeper key (BrokerZooKeeper.loadZkConfigFromDiamond reads zk.zkConnect
// from the properties resource server.ini on the classpath, which in
// MetaQ's layout is the conf/ directory beside the file), and where MetaQ's
// integration resources, its tools and its clients keep it: zk.properties.
// Both are read as java.util.Properties, in the directory of path:
// zk.properties first, then server.ini (unless path is that file).
func zkConnectBeside(path string) zkConnectFrom {
	return func() (string, string, []string) {
		dir := filepath.Dir(path)
		tried := []string{filepath.Join(dir, "zk.properties")}
		if filepath.Base(path) != "server.ini" {
			tried = append(tried, filepath.Join(dir, "server.ini"))
		}
		for _, f := range tried {
			data, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, kv := range parseProperties(data) {
				if kv[0] == "zk.zkConnect" && strings.TrimSpace(kv[1]) != "" {
					return strings.TrimSpace(kv[1]), f, tried
				}
			}
		}
		return "", "", tried
	}
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}

// Parse validates server.ini bytes; file names them in errors and warnings
// and is kept in Server.File. Parse reads nothing from disk: an overlay named
// in [site] is not followed (use Load or ParseWithOverlay).
func Parse(file string, data []byte) (*Server, []Warning, error) {
	var p problems
	base := readIni(file, data, &p)
	return build(file, data, base, "", nil, "", nil, &p)
}

// ParseWithOverlay validates a shared server.ini together with one site's
// overlay file.
//
// The design: one server.ini is shared by every site and configsync pushes
// it, byte for byte, to all of them. What must differ per datacenter (hostName,
// serverPort, dataPath, the [site] name and listen addresses, [gossip] and
// [nats] endpoints) lives in a small overlay file next to it, in the same
// INI format, named by [site] overlay= or given by the caller. Every key in
// the overlay replaces the base file's key of the same section (sections the
// base lacks are added). A push never writes the overlay, so a site keeps its
// identity across rollouts.
//
// Raw and Checksum stay those of the base file: that is what configsync
// ships and what `stats config` serves to async slaves, which compare it with
// their own copy. Problems found in the overlay name the overlay file.
// An empty overlayFile with nil overlay is the same as Parse.
func ParseWithOverlay(file string, data []byte, overlayFile string, overlay []byte) (*Server, []Warning, error) {
	var p problems
	base := readIni(file, data, &p)
	var over *rawIni
	if overlay != nil || overlayFile != "" {
		over = readIni(overlayFile, overlay, &p)
	}
	return build(file, data, base, overlayFile, over, "", nil, &p)
}

func build(file string, data []byte, base *rawIni, overlayFile string, overlay *rawIni, appClassPath string, zkFrom zkConnectFrom, p *problems) (*Server, []Warning, error) {
	if base == nil {
		return nil, p.warnings, p.err()
	}
	if overlay != nil {
		if site := overlay.section(sectionSite); site != nil {
			if k, ok := site.get("overlay"); ok {
				p.warnf(overlayFile, sectionSite, k.Name, "ignored in an overlay file: an overlay cannot name another overlay")
				// Keep the base file's setting.
				var kept []rawKey
				for _, x := range site.Keys {
					if x.Name != "overlay" {
						kept = append(kept, x)
					}
				}
				site.Keys = kept
			}
		}
		overlayOnto(base, overlay)
	}
	s := &Server{
		File:     file,
		Raw:      data,
		Checksum: crc32.ChecksumIEEE(data),
	}
	sys := base.section(sectionSystem)
	if sys == nil {
		p.errorf(file, sectionSystem, "", "", "a [system] section (MetaQ requires it)")
	}
	zk := base.section(sectionZooKeeper)
	if zk == nil {
		p.errorf(file, sectionZooKeeper, "", "", "a [zookeeper] section (MetaQ requires it)")
	}
	s.System = buildSystem(sectionReader{sec: sys, file: file, p: p}, appClassPath)
	s.ZooKeeper = buildZooKeeper(sectionReader{sec: zk, file: file, p: p}, zkFrom)

	for _, sec := range base.Sections {
		switch {
		case sec.Name == sectionSystem, sec.Name == sectionZooKeeper, sec.Name == sectionSite,
			sec.Name == sectionGossip, sec.Name == sectionNATS, sec.Name == sectionReplication, sec.Name == sectionLimits:
		case sec.Name == sectionSlaveInert:
			p.warnf(sec.File, sec.Name, "", "accepted for MetaQ compatibility but has no effect (MetaQ ignores it too): a slave reads async_slave.properties")
		case strings.HasPrefix(sec.Name, topicPrefix):
			if t, ok := buildTopic(sectionReader{sec: sec, file: file, p: p}, s.System); ok {
				s.Topics = append(s.Topics, t)
			}
		default:
			p.unknownf(sec.File, sec.Name, "", "unknown section is ignored (so does MetaQ); did you mean [%s]?", closestSection(sec.Name))
		}
	}
	if len(s.Topics) == 0 && !hasTopicSection(base) {
		p.errorf(file, topicPrefix+"<name>", "", "", "at least one [topic=<name>] section (MetaQ's verify refuses an empty topic list)")
	}
	buildExtensions(s, base, file, p)
	if err := p.err(); err != nil {
		return nil, p.warnings, err
	}
	return s, p.warnings, nil
}

func hasTopicSection(r *rawIni) bool {
	for _, s := range r.Sections {
		if strings.HasPrefix(s.Name, topicPrefix) {
			return true
		}
	}
	return false
}

func buildSystem(r sectionReader, appClassPath string) System {
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	cpus := runtime.NumCPU()
	sys := System{
		ServerPort:                DefaultServerPort,
		DashboardHTTPPort:         DefaultDashboardHTTPPort,
		DataPath:                  filepath.Join(home, "meta"),
		AppClassPath:              appClassPath,
		NumPartitions:             DefaultNumPartitions,
		UnflushThreshold:          DefaultUnflushThreshold,
		UnflushInterval:           DefaultUnflushInterval,
		MaxSegmentSize:            DefaultMaxSegmentSize,
		MaxTransferSize:           DefaultMaxTransferSize,
		GetProcessThreadCount:     10 * cpus,
		PutProcessThreadCount:     10 * cpus,
		QuartzThreadCount:         DefaultQuartzThreadCount,
		MaxCheckpoints:            DefaultMaxCheckpoints,
		CheckpointInterval:        DefaultCheckpointInterval,
		MaxTxTimeoutTimerCapacity: DefaultMaxTxTimeoutTimerCapacity,
		FlushTxLogAtCommit:        DefaultFlushTxLogAtCommit,
		MaxTxTimeoutInSeconds:     DefaultMaxTxTimeoutInSeconds,
		AcceptPublish:             true,
		AcceptSubscribe:           true,
	}
	sys.DeletePolicy, _, _ = ParseDeletePolicy(DefaultDeletePolicy)
	sys.DeleteWhen, _ = ParseCron(DefaultDeleteWhen)
	if r.sec == nil {
		sys.DataLogPath = sys.DataPath
		return sys
	}
	r.checkKeys(systemKeys, systemInertKeys, false)
	for _, k := range systemRequiredKeys {
		r.required(k)
	}
	sys.BrokerID = int(r.integer("brokerId", 0, 0, maxBrokerID))
	sys.HostName = r.str("hostName", "")
	sys.ServerPort = int(r.integer("serverPort", DefaultServerPort, 0, 65535))
	sys.DashboardHTTPPort = int(r.integer("dashboardHttpPort", DefaultDashboardHTTPPort, 0, 65535))
	sys.DataPath = r.str("dataPath", sys.DataPath)
	sys.DataLogPath = r.str("dataLogPath", sys.DataPath)
	sys.AppClassPath = r.str("appClassPath", sys.AppClassPath)
	sys.NumPartitions = r.int32("numPartitions", DefaultNumPartitions, 1)
	sys.UnflushThreshold = int(r.integer("unflushThreshold", DefaultUnflushThreshold, math.MinInt32, math.MaxInt32))
	sys.UnflushInterval = time.Duration(r.int32("unflushInterval", int(DefaultUnflushInterval.Milliseconds()), 0)) * time.Millisecond
	sys.MaxSegmentSize = int64(r.int32("maxSegmentSize", DefaultMaxSegmentSize, 1))
	sys.MaxTransferSize = r.int32("maxTransferSize", DefaultMaxTransferSize, 1)
	sys.GetProcessThreadCount = r.int32("getProcessThreadCount", sys.GetProcessThreadCount, 1)
	sys.PutProcessThreadCount = r.int32("putProcessThreadCount", sys.PutProcessThreadCount, 1)
	sys.DeletePolicy = deletePolicyKey(r, sys.DeletePolicy)
	sys.DeleteWhen = cronKey(r, sys.DeleteWhen)
	sys.QuartzThreadCount = r.int32("quartzThreadCount", DefaultQuartzThreadCount, 1)
	sys.MaxCheckpoints = r.int32("maxCheckpoints", DefaultMaxCheckpoints, 1)
	sys.CheckpointInterval = r.millis("checkpointInterval", DefaultCheckpointInterval, 1)
	sys.MaxTxTimeoutTimerCapacity = r.int32("maxTxTimeoutTimerCapacity", DefaultMaxTxTimeoutTimerCapacity, 1)
	if k, ok := r.raw("flushTxLogAtCommit"); ok {
		v, err := evalInt(k.Value)
		if err != nil || v < 0 || v > 2 {
			r.bad(k, "0 (let the OS flush), 1 (fsync at every commit) or 2 (fsync once a second)")
		} else {
			sys.FlushTxLogAtCommit = int(v)
		}
	}
	sys.MaxTxTimeoutInSeconds = r.int32("maxTxTimeoutInSeconds", DefaultMaxTxTimeoutInSeconds, 1)
	sys.AcceptPublish = r.boolean("acceptPublish", true)
	sys.AcceptSubscribe = r.boolean("acceptSubscribe", true)
	sys.Stat = r.boolean("stat", false)
	sys.UpdateConsumerOffsets = r.boolean("updateConsumerOffsets", false)
	sys.LoadMessageStoresInParallel = r.boolean("loadMessageStoresInParallel", false)
	return sys
}

func deletePolicyKey(r sectionReader, def DeletePolicy) DeletePolicy {
	k, ok := r.raw("deletePolicy")
	if !ok {
		return def
	}
	dp, warn, err := ParseDeletePolicy(k.Value)
	if err != nil {
		r.bad(k, "delete,<age> or archive,<age>[,true|false], age in hours or with unit s, m or h (%v)", err)
		return def
	}
	if warn != "" {
		r.p.warnf(k.File, r.name(), k.Name, "%s", warn)
	}
	return dp
}

func cronKey(r sectionReader, def Cron) Cron {
	k, ok := r.raw("deleteWhen")
	if !ok {
		return def
	}
	c, err := ParseCron(k.Value)
	if err != nil {
		r.bad(k, "a Quartz cron expression \"sec min hour day-of-month month day-of-week [year]\" such as \"0 0 6,18 * * ?\" (%v)", err)
		return def
	}
	return c
}

func buildZooKeeper(r sectionReader, zkFrom zkConnectFrom) ZooKeeper {
	z := ZooKeeper{
		Connect:           DefaultZkConnect,
		SessionTimeout:    DefaultZkSessionTimeout,
		ConnectionTimeout: DefaultZkConnectionTimeout,
		SyncTime:          DefaultZkSyncTime,
		Enable:            true,
		Root:              DefaultZkRoot,
	}
	if r.sec == nil {
		return z
	}
	// MetaQ accepts every [system] key in [zookeeper] too (and ignores it).
	var inert []string
	inert = append(inert, systemKeys...)
	inert = append(inert, systemInertKeys...)
	r.checkKeys(zkKeys, inert, false)
	z.Enable = r.boolean("zk.zkEnable", true)
	// MetaConfig.verify refuses a blank zk.zkConnect even with zkEnable=false;
	// we only require it when ZooKeeper is used. A file that leaves it unset
	// (MetaQ's samsa_server1.ini) takes it from beside the file, as MetaQ's
	// broker does (zkConnectBeside).
	z.Connect = r.str("zk.zkConnect", DefaultZkConnect)
	if _, set := r.raw("zk.zkConnect"); z.Enable && !set {
		var value, from string
		var tried []string
		if zkFrom != nil {
			value, from, tried = zkFrom()
		}
		switch {
		case value != "":
			z.Connect = value
			r.p.warnf(r.file, r.name(), "zk.zkConnect", "unset here: %s taken from %s, as MetaQ does", value, from)
		case len(tried) > 0:
			k, present := r.sec.get("zk.zkConnect")
			if !present {
				k = rawKey{Name: "zk.zkConnect", File: r.file}
			}
			r.bad(k, "a value, here or as zk.zkConnect in %s (where MetaQ looks when its file sets none)", strings.Join(tried, " or "))
		default:
			r.required("zk.zkConnect")
		}
	}
	z.SessionTimeout = time.Duration(r.int32("zk.zkSessionTimeoutMs", int(DefaultZkSessionTimeout.Milliseconds()), 1)) * time.Millisecond
	z.ConnectionTimeout = time.Duration(r.int32("zk.zkConnectionTimeoutMs", int(DefaultZkConnectionTimeout.Milliseconds()), 1)) * time.Millisecond
	z.SyncTime = time.Duration(r.int32("zk.zkSyncTimeMs", int(DefaultZkSyncTime.Milliseconds()), 0)) * time.Millisecond
	if k, ok := r.raw("zk.zkRoot"); ok {
		root, err := normaliseZkRoot(k.Value)
		if err != nil {
			r.bad(k, "a ZooKeeper path such as /meta (%v)", err)
		} else {
			z.Root = root
		}
	}
	return z
}

// normaliseZkRoot gives the root a leading '/' and no trailing '/', so
// callers can always write Root + "/brokers".
func normaliseZkRoot(s string) (string, error) {
	s = "/" + strings.Trim(s, "/")
	if s == "/" {
		return "", fmt.Errorf("the root / itself would give paths such as //brokers")
	}
	for part := range strings.SplitSeq(s[1:], "/") {
		if part == "" || part == "." || part == ".." {
			return "", fmt.Errorf("empty, . or .. path element")
		}
		for _, c := range part {
			if unicode.IsSpace(c) || unicode.IsControl(c) {
				return "", fmt.Errorf("whitespace or control character")
			}
		}
	}
	return s, nil
}

// TopicPattern turns a topic section name into the anchored regular
// expression MetaQ matches topics against: each '*' becomes ".*" and the
// whole name must match (MessageStoreManager.makeTopicsPatSet, isLegalTopic).
func TopicPattern(name string) string {
	return "^(?:" + strings.ReplaceAll(name, "*", ".*") + ")$"
}

// checkTopicName returns why MetaQ (or a MetaQ client) could not use name,
// or "" when it is fine.
func checkTopicName(name string) string {
	switch {
	case strings.TrimSpace(name) == "":
		return "a non-empty topic name (MetaQ would register an empty ZooKeeper node name)"
	case strings.IndexFunc(name, func(c rune) bool { return unicode.IsSpace(c) || unicode.IsControl(c) }) >= 0:
		return "a topic name without whitespace or control characters (the MetaQ protocol splits commands on spaces)"
	case strings.Contains(name, "/"), name == ".", name == "..":
		return "a topic name without '/' and other than . or .. (it is a ZooKeeper node name under brokers/topics)"
	}
	if _, err := regexp.Compile(TopicPattern(name)); err != nil {
		return fmt.Sprintf("a topic name that compiles as a regular expression after '*' becomes '.*' (%v)", err)
	}
	return ""
}

func buildTopic(r sectionReader, sys System) (Topic, bool) {
	name := strings.TrimPrefix(r.sec.Name, topicPrefix)
	if why := checkTopicName(name); why != "" {
		r.p.errorf(r.sec.File, r.sec.Name, "", "", "%s", why)
		return Topic{}, false
	}
	r.checkKeys(topicKeys, topicInertKeys, true)
	t := Topic{
		Name:             name,
		Pattern:          TopicPattern(name),
		NumPartitions:    r.int32("numPartitions", sys.NumPartitions, 1),
		UnflushThreshold: int(r.integer("unflushThreshold", int64(sys.UnflushThreshold), math.MinInt32, math.MaxInt32)),
		UnflushInterval:  time.Duration(r.int32("unflushInterval", int(sys.UnflushInterval.Milliseconds()), 0)) * time.Millisecond,
		DataPath:         r.str("dataPath", sys.DataPath),
		DeletePolicy:     deletePolicyKey(r, sys.DeletePolicy),
		DeleteWhen:       cronKey(r, sys.DeleteWhen),
		AcceptPublish:    r.boolean("acceptPublish", sys.AcceptPublish),
		AcceptSubscribe:  r.boolean("acceptSubscribe", sys.AcceptSubscribe),
		Stat:             topicStat(r, sys.Stat),
		MinSyncSites:     int(r.integer("minSyncSites", 0, 0, 64)),
		SyncDegrade:      syncDegradeKey(r),
		ForwardPuts:      triKey(r, "forwardPuts"),
		StoreAndForward:  triKey(r, "storeAndForward"),
		Filters:          map[string]string{},
	}
	t.re = regexp.MustCompile(t.Pattern)
	for _, k := range r.sec.Keys {
		if group, ok := strings.CutPrefix(k.Name, filterKeyPrefix); ok {
			if group == "" {
				r.bad(k, "group.<consumerGroup>=<filter class>")
				continue
			}
			if strings.TrimSpace(k.Value) != "" { // MetaQ skips blank filter classes
				t.Filters[group] = k.Value
			}
		}
	}
	return t, true
}

// triKey reads a boolean key that may be left to the site's default.
func triKey(r sectionReader, key string) Forward {
	if _, ok := r.raw(key); !ok {
		return ForwardUnset
	}
	if r.boolean(key, false) {
		return ForwardOn
	}
	return ForwardOff
}

func syncDegradeKey(r sectionReader) string {
	k, ok := r.raw("syncDegrade")
	if !ok {
		return SyncDegradeRefuse
	}
	switch v := strings.ToLower(strings.TrimSpace(k.Value)); v {
	case SyncDegradeRefuse, SyncDegradeAsync:
		return v
	}
	r.bad(k, "refuse or async")
	return SyncDegradeRefuse
}

// TopicFor returns the configuration that governs topic name: the section
// named exactly name if there is one, otherwise the first [topic=...] section
// in file order whose pattern matches the whole name. ok is false when no
// section's pattern matches the name, as MetaQ's isLegalTopic decides: MetaQ
// refuses puts to such a topic. A section whose name does not match itself
// read as a pattern (MetaQ's integration tests configure [topic=!@#$%],
// where '$' is an anchor) therefore governs nothing: MetaQ registers it in
// ZooKeeper and refuses its puts ("The server do not accept topic !@#$%").
//
// MetaQ itself gives a topic that only matches a pattern the [system]
// values, not the pattern section's; using the pattern section's values is
// the more useful reading of a file that bothers to set them.
func (s *Server) TopicFor(name string) (Topic, bool) {
	exact, first := -1, -1
	for i, t := range s.Topics {
		if exact < 0 && t.Name == name {
			exact = i
		}
		if first < 0 && t.matches(name) {
			first = i
		}
	}
	switch {
	case first < 0:
		return Topic{}, false
	case exact >= 0:
		return s.Topics[exact], true
	}
	return s.Topics[first], true
}

// matches reports whether the section's pattern matches the whole name.
func (t Topic) matches(name string) bool {
	re := t.re
	if re == nil {
		var err error
		if re, err = regexp.Compile(t.Pattern); err != nil {
			return false
		}
	}
	return re.MatchString(name)
}

// topicStat reads a topic's stat key the way MetaQ does: with
// Boolean.valueOf, not Aviator, so any word but "true" means false. Such a
// word is accepted, as MetaQ accepts it, with a warning.
func topicStat(r sectionReader, def bool) bool {
	k, ok := r.raw("stat")
	if !ok {
		return def
	}
	switch strings.ToLower(k.Value) {
	case "true":
		return true
	case "false":
	default:
		r.p.warnf(k.File, r.name(), k.Name, "%q is not true or false; MetaQ reads it as false, and so do we", k.Value)
	}
	return false
}

func buildExtensions(s *Server, base *rawIni, file string, p *problems) {
	reader := func(name string, keys []string) sectionReader {
		r := sectionReader{sec: base.section(name), file: file, p: p}
		r.checkKeys(keys, nil, false)
		return r
	}
	port := func(offset int) string {
		if s.System.ServerPort == 0 {
			// serverPort=0 asks for a free port; so do the derived ones.
			return "0"
		}
		return strconv.Itoa(s.System.ServerPort + offset)
	}
	derivedOK := func(offset int) bool { return s.System.ServerPort+offset <= 65535 }

	r := reader(sectionSite, siteKeys)
	s.Site = Site{
		Name:          r.str("name", DefaultSiteName),
		DashboardAddr: r.addr("dashboardAddr", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.System.DashboardHTTPPort))),
		AdminAddr:     r.addr("adminAddr", ""), // unset: the unix socket System.AdminSocket only
		Token:         r.str("token", ""),
		Overlay:       r.str("overlay", ""),
		Dashboard:     base.hasKey(sectionSystem, "dashboardHttpPort") || base.hasKey(sectionSite, "dashboardAddr"),
		ForwardPuts:   r.boolean("forwardPuts", false),
		// Store and forward: see Topic.StoreAndForward.
		StoreAndForward: r.boolean("storeAndForward", false),
		OutboxMaxBytes:  r.integer("outboxMaxBytes", 0, 0, 1<<50),
		OutboxMaxAge:    r.millis("outboxMaxAgeMs", 0, 0),
		// The write gateway's bound, all connections together.
		ForwardMaxInFlightBytes: r.integer("forwardMaxInFlightBytes", 0, 0, 1<<50),
	}
	if s.Site.Token == "" && (!IsLoopbackAddr(s.Site.DashboardAddr) || (s.Site.AdminAddr != "" && !IsLoopbackAddr(s.Site.AdminAddr))) {
		k, ok := r.raw("dashboardAddr")
		if !ok || IsLoopbackAddr(k.Value) {
			k, _ = r.raw("adminAddr")
		}
		r.bad(k, "a loopback address, or a [site] token= when listening beyond this machine")
	}

	r = reader(sectionGossip, gossipKeys)
	s.Gossip = Gossip{
		Enable:        r.boolean("enable", r.sec != nil),
		Bind:          r.addr("bind", net.JoinHostPort("127.0.0.1", port(gossipPortOffset))),
		Advertise:     r.addr("advertise", ""),
		Key:           r.base64Key("key"),
		Label:         r.str("label", ""),
		ProbeInterval: r.millis("probeIntervalMs", DefaultGossipProbeInterval, 1),
	}
	if k, ok := r.raw("join"); ok {
		for item := range strings.SplitSeq(k.Value, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			if err := checkAddr(item); err != nil {
				r.bad(k, "a comma-separated list of host:port (%q: %v)", item, err)
				continue
			}
			s.Gossip.Join = append(s.Gossip.Join, item)
		}
	}

	r = reader(sectionNATS, natsKeys)
	s.NATS = NATS{
		Enabled:           r.sec != nil,
		URL:               r.str("url", ""),
		EmbeddedListen:    r.addr("embeddedListen", net.JoinHostPort("127.0.0.1", port(natsPortOffset))),
		EmbeddedListenSet: base.hasKey(sectionNATS, "embeddedListen"),
		CredsFile:         r.str("credsFile", ""),
		TLSCert:           r.str("tlsCert", ""),
		TLSKey:            r.str("tlsKey", ""),
		TLSCA:             r.str("tlsCA", ""),
		Bucket:            r.str("bucket", DefaultNATSBucket),
		Subject:           r.str("subject", DefaultNATSSubject),
		Agent:             r.str("agent", ""),
		TrustedKeys:       r.str("trustedKeys", ""),
		AllowUnsigned:     r.boolean("allowUnsigned", false),
	}
	if k, ok := r.raw("trustedKeys"); ok {
		if _, err := ParseTrustedKeys(k.Value); err != nil {
			r.bad(k, "a comma-separated list of ed25519:<base64> public keys as `configsync keygen` prints them (%v)", err)
		}
	}
	checkTLSPair(r, s.NATS.TLSCert, s.NATS.TLSKey)
	// The embedded server has no authentication: whoever reaches it can push
	// configuration. It is for one machine; several machines run NATS.
	if s.NATS.URL == "" && !IsLoopbackAddr(s.NATS.EmbeddedListen) {
		k, _ := r.raw("embeddedListen")
		r.bad(k, "a loopback address: the embedded NATS server has no authentication; across machines run a NATS cluster and set [nats] url")
	}

	r = reader(sectionReplication, replicationKeys)
	s.Replication = Replication{
		Enable: r.boolean("enable", true),
		// Unset: the replication stream shares the MetaQ port (a slave's
		// first byte tells it from a MetaQ client), so it needs no port
		// MetaQ did not use.
		Listen:               r.addr("listen", ""),
		ListenSet:            r.has("listen"),
		Advertise:            r.addr("advertise", ""),
		Compression:          r.oneOf("compression", DefaultCompression, compressions),
		BandwidthBytesPerSec: r.integer("bandwidthBytesPerSec", 0, 0, math.MaxInt64),
		StuckAfter:           r.millis("stuckAfterMs", DefaultStuckAfter, 1),
		TLSCert:              r.str("tlsCert", ""),
		TLSKey:               r.str("tlsKey", ""),
		TLSCA:                r.str("tlsCA", ""),
		FenceSites:           int(r.integer("fenceSites", 0, 0, 64)),
		Lease:                r.millis("leaseMs", DefaultLease, 100),
		SecretFile:           r.str("secretFile", ""),
		AutoFailover:         r.boolean("autoFailover", false),
		AutoFailoverAfter:    r.millis("autoFailoverAfterMs", DefaultAutoFailoverAfter, 100),
		HandoverHold:         r.millis("handoverHoldMs", DefaultHandoverHold, 0),
		HandoverHoldBytes:    r.integer("handoverHoldBytes", DefaultHandoverHoldBytes, 0, math.MaxInt64),
		HandoverHoldMax:      r.millis("handoverHoldMaxMs", DefaultHandoverHoldMax, 0),
		PromoteFinishTimeout: r.millis("promoteFinishTimeoutMs", DefaultPromoteFinishTimeout, 1000),

		AllowUnauthenticatedSwitchover: r.boolean("allowUnauthenticatedSwitchover", false),
	}
	checkTLSPair(r, s.Replication.TLSCert, s.Replication.TLSKey)
	if k, ok := r.raw("sites"); ok {
		_, siteNamed := base.sectionKey(sectionSite, "name")
		seen := map[string]bool{}
		for item := range strings.SplitSeq(k.Value, ",") {
			item = strings.TrimSpace(item)
			switch {
			case item == "":
				continue
			case seen[item]:
				r.bad(k, "a comma-separated list of distinct site names (%q is listed twice)", item)
			}
			seen[item] = true
			s.Replication.Sites = append(s.Replication.Sites, item)
		}
		slices.Sort(s.Replication.Sites)
		switch {
		case len(s.Replication.Sites) > MaxSites:
			r.bad(k, "at most %d site names", MaxSites)
		case len(s.Replication.Sites) > 0 && siteNamed && !slices.Contains(s.Replication.Sites, s.Site.Name):
			// A site the list lacks has no class of generations: it could
			// take a number another site's class holds. A file that names
			// no site (deploy/'s shared server.ini, as configsync push
			// validates it) is checked where a site's overlay names it.
			r.bad(k, "a list that names this site ([site] name=%s): every site of the deployment is listed", s.Site.Name)
		}
	}

	s.Limits = buildLimits(reader(sectionLimits, limitsKeys))

	// A derived port must be a port: only for a section that is written
	// and leaves its address to the default.
	for _, d := range []struct {
		on           bool
		section, key string
		offset       int
	}{
		{s.Gossip.Enable, sectionGossip, "bind", gossipPortOffset},
		{s.NATS.Enabled && s.NATS.URL == "", sectionNATS, "embeddedListen", natsPortOffset},
	} {
		if _, set := base.sectionKey(d.section, d.key); d.on && !set && !derivedOK(d.offset) {
			sr := sectionReader{sec: base.section(sectionSystem), file: file, p: p}
			k, _ := sr.raw("serverPort")
			sr.bad(k, "a port at most %d, so serverPort+%d ([%s] %s) is a port too, or that address set explicitly",
				65535-d.offset, d.offset, d.section, d.key)
		}
	}
}

func buildLimits(r sectionReader) Limits {
	l := Limits{
		MaxConnections:           int(r.integer("maxConnections", DefaultMaxConnections, 0, math.MaxInt32)),
		MaxConnectionsPerAddress: int(r.integer("maxConnectionsPerAddress", DefaultMaxConnectionsPerAddress, 0, math.MaxInt32)),
		IdleTimeout:              r.millis("idleTimeoutMs", DefaultIdleTimeout, 0),
		ReadTimeout:              r.millis("readTimeoutMs", DefaultReadTimeout, 0),
		WriteTimeout:             r.millis("writeTimeoutMs", DefaultWriteTimeout, 1),
		GetWait:                  r.millis("getWaitMs", 0, 0),
		GetWaitMinBytes:          r.integer("getWaitMinBytes", DefaultGetWaitMinBytes, 0, math.MaxInt32),
		GetWaitLinger:            r.millis("getWaitLingerMs", DefaultGetWaitLinger, 0),
		MaxConnectionBufferedBytes: r.integer("maxConnectionBufferedBytes", DefaultMaxConnectionBufferedBytes,
			MinConnectionBufferedBytes, math.MaxInt64),
	}
	l.MaxBufferedBytes = r.integer("maxBufferedBytes", max(DefaultMaxBufferedBytes, l.MaxConnectionBufferedBytes),
		l.MaxConnectionBufferedBytes, math.MaxInt64)
	// 0 (absent): half of maxBufferedBytes, however that is set.
	l.MaxAddressBufferedBytes = r.integer("maxAddressBufferedBytes", 0, l.MaxConnectionBufferedBytes, l.MaxBufferedBytes)
	// "host" keeps the host's default.
	if l.TCPCongestion = strings.TrimSpace(r.str("tcpCongestion", DefaultTCPCongestion)); l.TCPCongestion == "host" {
		l.TCPCongestion = ""
	}
	return l
}

func checkTLSPair(r sectionReader, cert, key string) {
	if (cert == "") != (key == "") {
		k, ok := r.raw("tlsCert")
		if !ok {
			k, _ = r.raw("tlsKey")
		}
		r.bad(k, "tlsCert and tlsKey set together")
	}
}

// hasKey reports whether section.key is written, even with a blank value.
func (r *rawIni) hasKey(section, key string) bool {
	if s := r.section(section); s != nil {
		_, ok := s.get(key)
		return ok
	}
	return false
}

func (r *rawIni) sectionKey(section, key string) (rawKey, bool) {
	s := r.section(section)
	if s == nil {
		return rawKey{}, false
	}
	k, ok := s.get(key)
	if !ok || strings.TrimSpace(k.Value) == "" {
		return rawKey{}, false
	}
	return k, true
}
