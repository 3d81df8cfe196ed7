// Command metaq-server runs and operates a broker bundle, with the commands
// of MetaQ's bin/metaServer.sh (see metaServer.sh in broker/wire/doc.go):
//
//	metaq-server start [slave|samsa|gregor] -f server.ini [-s props] [-foreground]
//	metaq-server stop|restart|status|reload -f server.ini
//	metaq-server stats [-item X] -f server.ini
//	metaq-server slave-status -f server.ini
//	metaq-server close-partitions -topic T -start a -end b -f server.ini
//	metaq-server open-partitions -topic T [-start a -end b] -f server.ini
//	metaq-server move-partitions -topic T -start a -end b -offset n -f server.ini   (server stopped)
//	metaq-server delete-partitions -topic T -start a -end b -f server.ini          (server stopped)
//	metaq-server repair -topic T -partition P -from host:port -f server.ini
//	metaq-server query -f server.ini [-group G] [-topic T]
//	metaq-server check -f server.ini [-s async_slave.properties]
//	metaq-server role [-clear] -f server.ini
//
// There is no JMX: stop is SIGTERM (a clean stop), reload is the admin
// endpoint or SIGHUP, and the partition and status commands use the admin
// endpoint: the unix socket <dataPath>/admin.sock, or [site] adminAddr when
// set (a server started with -data is reached with the same -data).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/broker/config"
	"metaq/cmd/metaq-server/ctl"
	"metaq/configsync"
	"metaq/internal/bundle"
	cmdline "metaq/internal/cli"
)

const usage = `usage: metaq-server <command> [arguments]

commands:
  start [slave|samsa|gregor] -f server.ini [-s file] [-foreground]
  stop | restart | status | reload        -f server.ini
  stats [-item X]                         -f server.ini
  slave-status                            -f server.ini
  promote [-force] [-wait]              -f server.ini (at a slave site: become master; refused while the master is alive)
  unreplicated [-publish [-brokers h:p]]  -f server.ini (records a former master cut and saved aside)
  switchover -to <slave> [-follow addr]   -f server.ini (at any site: the master hands over to a slave, nothing lost, then follows it)
  role [-clear]                           -f server.ini (the role a failover gave this site, which overrides start; -clear: server stopped)
  close-partitions -topic T -start a -end b -f server.ini
  open-partitions  -topic T [-start a -end b] -f server.ini
  move-partitions  -topic T -start a -end b -offset n -f server.ini
  delete-partitions -topic T -start a -end b -f server.ini
  repair -topic T -partition P -from host:port -f server.ini
  query -f server.ini [-group G] [-topic T]
  check -f server.ini [-s async_slave.properties]
Run "metaq-server <command> -h" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	err := run(cmd, args)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0) // asked for: the usage is on stdout
	}
	if errors.As(err, new(cmdline.UsageError)) {
		os.Exit(2) // the usage and what was wrong are on stderr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "metaq-server "+cmd+": "+err.Error())
		var ec exitCode
		if errors.As(err, &ec) {
			os.Exit(int(ec))
		}
		os.Exit(1)
	}
}

// exitCode lets a command choose its exit status (status: 1 = not running).
type exitCode int

func (e exitCode) Error() string { return "exit " + strconv.Itoa(int(e)) }

// common holds the values of a command's flags; each command defines only
// the flags it uses (see commands), so -h lists those and any other flag is
// refused.
type common struct {
	fs       *flag.FlagSet
	config   string
	plugin   string
	logDir   string
	pidFile  string
	fg       bool
	verbose  bool
	topic    string
	start    int
	end      int
	offset   int
	item     string
	group    string
	tries    int
	wait     time.Duration
	timeout  time.Duration
	listen   string
	admin    string
	dataPath string
	force    bool
	waitFree bool
	clear    bool
	to       string
	follow   string
	publish  bool
	brokers  string
	part     int
	from     string
	json     bool
	allowUnk bool
	gcFloor  int
}

// Groups of flags, combined per command.
func (c *common) configFlag() {
	c.fs.StringVar(&c.config, "f", "conf/server.ini", "server.ini `path`")
}

func (c *common) fileFlags() {
	c.fs.StringVar(&c.logDir, "logdir", "", "log and pid `dir` (default $METAQ_LOG_DIR or <server.ini dir>/../logs)")
	c.fs.StringVar(&c.pidFile, "pidfile", "", "pid `file` (default <logdir>/.run.pid for conf/server.ini, else <logdir>/.<config name>.run.pid)")
}

func (c *common) startFlags() {
	c.fs.StringVar(&c.plugin, "s", "", "properties `file` of the mode: async_slave.properties (slave) or samsa_master.properties (samsa)")
	c.fs.BoolVar(&c.fg, "foreground", false, "run in the foreground instead of detaching")
	c.fs.BoolVar(&c.verbose, "v", false, "debug logging")
	c.fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "how long to wait for the server to answer")
	c.fs.StringVar(&c.listen, "listen", "", "MetaQ protocol listen `address` (default :<serverPort>)")
	c.fs.StringVar(&c.admin, "admin", "", "TCP listen `address` of the admin endpoint besides its unix socket <dataPath>/admin.sock (default [site] adminAddr, else none; \"off\" disables the endpoint)")
	c.fs.IntVar(&c.gcFloor, "gcfloor", defaultGCFloorMiB, "keep the garbage collector's heap goal at least about twice this many `MiB` (a ballast of address space, not resident memory), and take that much heap from the system at start (0, GOGC or GOMEMLIMIT in the environment: neither)")
	c.dataFlag()
	c.allowUnknownFlag()
}

func (c *common) allowUnknownFlag() {
	c.fs.BoolVar(&c.allowUnk, "allow-unknown", false, "accept keys and sections this project does not know (refused by default: a typo loses its setting)")
}

func (c *common) dataFlag() {
	c.fs.StringVar(&c.dataPath, "data", "", "override [system] dataPath (the transaction journal moves with it unless dataLogPath names its own `dir`)")
}

// adminDataFlag is -data for a command that calls the admin endpoint: its
// unix socket is in the data directory, so a server started with -data is
// reached with the same -data.
func (c *common) adminDataFlag() {
	c.fs.StringVar(&c.dataPath, "data", "", "the -data `dir` the server was started with, where its admin socket is (default [system] dataPath)")
}

func (c *common) stopFlags() {
	c.fs.IntVar(&c.tries, "tries", 5, "the clean stop may take tries × wait before SIGKILL (one SIGTERM is sent)")
	c.fs.DurationVar(&c.wait, "wait", 3*time.Second, "see -tries")
}

func (c *common) jsonFlag() {
	c.fs.BoolVar(&c.json, "json", false, "print the admin endpoint's whole JSON document instead of a summary")
}

func (c *common) partitionFlags() {
	c.fs.StringVar(&c.topic, "topic", "", "topic")
	c.fs.IntVar(&c.start, "start", -1, "first partition")
	c.fs.IntVar(&c.end, "end", -1, "last partition (inclusive)")
}

// command is one subcommand: its arguments for the usage line and the
// flags it takes.
type command struct {
	args  string
	flags []func(*common)
}

var commands = map[string]command{
	"start":   {"[slave|samsa|gregor] [flags]", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).startFlags}},
	"restart": {"[slave|samsa|gregor] [flags]", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).startFlags, (*common).stopFlags}},
	"stop":    {"[flags]", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).stopFlags}},
	"status":  {"[-json] [flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, (*common).fileFlags, (*common).jsonFlag}},
	"reload":  {"[flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, (*common).fileFlags}},
	"stats": {"[flags]", []func(*common){(*common).configFlag, func(c *common) {
		c.fs.StringVar(&c.item, "item", "", "stats item (topics, offsets, realtime, slave, config, help, reset or a topic)")
	}}},
	"slave-status": {"[-json] [flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, (*common).jsonFlag}},
	"repair": {"-topic T -partition P -from host:port [flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, func(c *common) {
		c.fs.StringVar(&c.topic, "topic", "", "topic")
		c.fs.IntVar(&c.part, "partition", -1, "partition")
		c.fs.StringVar(&c.from, "from", "", "MetaQ `address` (host:port) of a replica holding the damaged records")
	}}},
	"promote": {"[-force] [-wait] [-json] [flags]   (at a slave site: become master)", []func(*common){(*common).configFlag, (*common).adminDataFlag, func(c *common) {
		c.fs.BoolVar(&c.force, "force", false, "even while the master is alive and reachable (replication link, gossip or ZooKeeper)")
		c.fs.BoolVar(&c.waitFree, "wait", false, "when the master node is held by a live ZooKeeper session not known to be a dead master's, wait for it to expire instead of refusing")
		c.fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	}}},
	"switchover": {"-to <slave> [-follow addr] [-json] [flags]   (at any site: the master hands over to a slave, nothing lost, then follows it)", []func(*common){(*common).configFlag, (*common).adminDataFlag, func(c *common) {
		c.fs.StringVar(&c.to, "to", "", "the slave that takes over (slave group, its last '-' field, or slaveId)")
		c.fs.StringVar(&c.follow, "follow", "", "without ZooKeeper: the new master's replication `address`, which the old master then follows as a slave")
		c.fs.BoolVar(&c.json, "json", false, "print the report as JSON")
	}}},
	"unreplicated": {"[-publish [-brokers h:p]] [flags]   (records a former master cut and saved aside)", []func(*common){(*common).configFlag, (*common).dataFlag, func(c *common) {
		c.fs.BoolVar(&c.publish, "publish", false, "publish the saved records again, as new messages")
		c.fs.StringVar(&c.brokers, "brokers", "", "the master's host:port when ZooKeeper is off")
	}}},
	"role": {"[-clear] [flags]   (the role a failover gave this site; it overrides the start command)", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).dataFlag, func(c *common) {
		c.fs.BoolVar(&c.clear, "clear", false, "remove it (server stopped): the next start takes the role its command line says")
	}}},
	"close-partitions": {"-topic T -start a -end b [flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, (*common).partitionFlags}},
	"open-partitions":  {"-topic T [-start a -end b] [flags]", []func(*common){(*common).configFlag, (*common).adminDataFlag, (*common).partitionFlags}},
	"move-partitions": {"-topic T -start a -end b -offset n [flags]   (server stopped)", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).partitionFlags, (*common).dataFlag, func(c *common) {
		c.fs.IntVar(&c.offset, "offset", 0, "number added to each partition number")
	}}},
	"delete-partitions": {"-topic T -start a -end b [flags]   (server stopped)", []func(*common){(*common).configFlag, (*common).fileFlags, (*common).partitionFlags, (*common).dataFlag}},
	"query": {"[-group G] [-topic T] [flags]", []func(*common){(*common).configFlag, func(c *common) {
		c.fs.StringVar(&c.group, "group", "", "consumer group (default: list groups)")
		c.fs.StringVar(&c.topic, "topic", "", "only this topic")
	}}},
	"check": {"[flags]", []func(*common){(*common).configFlag, (*common).allowUnknownFlag, func(c *common) {
		c.fs.StringVar(&c.plugin, "s", "", "async_slave.properties `file` to check too")
	}}},
}

// newFlags returns the flag set of command name, or nil for an unknown one.
func newFlags(name string) *common {
	cmd, ok := commands[name]
	if !ok {
		return nil
	}
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError), start: -1, end: -1, part: -1}
	c.fs.Usage = func() {
		fmt.Fprintf(c.fs.Output(), "usage: metaq-server %s %s\n\nflags:\n", name, cmd.args)
		c.fs.PrintDefaults()
	}
	for _, add := range cmd.flags {
		add(c)
	}
	return c
}

func (c *common) files() ctl.Files { return ctl.DefaultFiles(c.config, c.logDir, c.pidFile) }

// load reads server.ini with the command line's overrides applied; -data is
// applied here and nowhere else, so every command sees the same directories.
func (c *common) load() (*config.Server, error) {
	cfg, _, err := config.Load(c.config)
	if err != nil {
		return nil, err
	}
	cfg.System.MoveData(c.dataPath)
	return cfg, nil
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func run(cmd string, args []string) error {
	switch cmd {
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	c := newFlags(cmd)
	if c == nil {
		fmt.Fprint(os.Stderr, usage)
		return exitCode(2)
	}
	var mode string
	if cmd == "start" || cmd == "restart" {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			mode, args = args[0], args[1:]
		}
		if _, err := bundle.ParseMode(mode); err != nil {
			fmt.Fprintf(os.Stderr, "metaq-server %s: %v\n", cmd, err)
			return cmdline.UsageError{Err: err}
		}
	}
	if err := cmdline.Parse(c.fs, args, false, os.Stdout, os.Stderr); err != nil {
		if errors.As(err, new(cmdline.UsageError)) && c.fs.NArg() > 0 {
			c.fs.Usage()
		}
		return err
	}
	ctx := context.Background()
	switch cmd {
	case "start":
		return start(ctx, c, mode)
	case "restart":
		// Without a mode word or -s, restart in the mode the server was
		// started with (a slave stays a slave, with its properties file).
		if mode == "" && c.plugin == "" {
			if rec, err := readStartRecord(c.files().PID); err == nil && (rec.Mode != "" || rec.Plugin != "") {
				mode, c.plugin = rec.Mode, rec.Plugin
				say("restarting as it was started: %s", rec)
			}
		}
		if err := ctl.Stop(ctx, c.files().PID, c.tries, c.wait, say); err != nil && !errors.Is(err, ctl.ErrNotRunning) {
			return err
		}
		return start(ctx, c, mode)
	case "stop":
		err := ctl.Stop(ctx, c.files().PID, c.tries, c.wait, say)
		if errors.Is(err, ctl.ErrNotRunning) {
			say("metaq-server is not running")
			return nil
		}
		if err == nil {
			say("metaq-server stopped")
		}
		return err
	case "status":
		return status(ctx, c)
	case "reload":
		return reload(ctx, c)
	case "stats":
		cfg, err := c.load()
		if err != nil {
			return err
		}
		body, err := ctl.Stats(ctx, ctl.ProtocolAddr(cfg), c.item, 10*time.Second)
		fmt.Print(body)
		return err
	case "slave-status":
		cfg, err := c.load()
		if err != nil {
			return err
		}
		body, err := ctl.NewAdmin(cfg).Do(ctx, "GET", "/slave-status", nil)
		if err != nil {
			return err // it carries the answer's text
		}
		if c.json {
			fmt.Print(body)
			return nil
		}
		return printSlaveSummary(os.Stdout, []byte(body))
	case "unreplicated":
		cfg, err := c.load()
		if err != nil {
			return err
		}
		if c.publish {
			return publishUnreplicated(ctx, os.Stdout, cfg, c.brokers)
		}
		_, err = listUnreplicated(os.Stdout, unreplicatedDir(cfg))
		return err
	case "switchover":
		if c.to == "" {
			return errors.New("-to is required")
		}
		return reportCall(ctx, c, "/switchover", url.Values{"to": {c.to}, "follow": {c.follow}}, printSwitchover)
	case "promote":
		q := url.Values{}
		if c.force {
			q.Set("force", "true")
		}
		if c.waitFree {
			q.Set("wait", "true")
		}
		return reportCall(ctx, c, "/promote", q, printPromote)
	case "close-partitions", "open-partitions":
		if c.topic == "" {
			return errors.New("-topic is required")
		}
		q := url.Values{"topic": {c.topic}}
		if c.start >= 0 || c.end >= 0 || cmd == "close-partitions" {
			if c.start < 0 || c.end < c.start {
				return errors.New("-start and -end (start <= end) are required")
			}
			q.Set("start", strconv.Itoa(c.start))
			q.Set("end", strconv.Itoa(c.end))
		}
		return adminCall(ctx, c, "POST", "/"+cmd, q)
	case "repair":
		if c.topic == "" || c.part < 0 || c.from == "" {
			return errors.New("-topic, -partition and -from are required")
		}
		return adminCall(ctx, c, "POST", "/repair", url.Values{"topic": {c.topic}, "partition": {strconv.Itoa(c.part)}, "from": {c.from}})
	case "move-partitions", "delete-partitions":
		if c.topic == "" || c.start < 0 || c.end < c.start {
			return errors.New("-topic, -start and -end (start <= end) are required")
		}
		cfg, err := c.load()
		if err != nil {
			return err
		}
		if cmd == "delete-partitions" {
			return ctl.DeletePartitions(cfg, c.files().PID, c.topic, c.start, c.end, say)
		}
		return ctl.MovePartitions(ctx, cfg, c.files().PID, c.topic, c.start, c.end, c.offset, say)
	case "query":
		cfg, err := c.load()
		if err != nil {
			return err
		}
		return ctl.Query(ctx, cfg, c.group, c.topic, os.Stdout)
	case "check":
		return check(c)
	case "role":
		return role(c)
	}
	panic("metaq-server: command " + cmd + " has flags but no action")
}

func start(ctx context.Context, c *common, modeName string) error {
	mode, err := bundle.ParseMode(modeName)
	if err != nil {
		return err
	}
	if !c.fg {
		// Check the configuration here, so that mistakes are printed to the
		// operator and not only into the log.
		cfg, warnings, err := config.Load(c.config)
		if err != nil {
			return err
		}
		if err := refuseUnknown(c, cfg, warnings); err != nil {
			return err
		}
		cfg.System.MoveData(c.dataPath)
		if r, err := bundle.PersistedRole(cfg.System.DataPath); err != nil {
			return err
		} else if notice := bundle.RoleOverride(mode, r, c.config); notice != "" {
			say("WARNING: the role this site took at run time overrides the start command: %s", notice)
		}
		childArgs := []string{"start"}
		if modeName != "" {
			childArgs = append(childArgs, modeName)
		}
		// The flags given (restart has some start does not take), in
		// the form start parses.
		startFlags := newFlags("start").fs
		c.fs.Visit(func(f *flag.Flag) {
			if f.Name != "foreground" && f.Name != "s" && startFlags.Lookup(f.Name) != nil {
				childArgs = append(childArgs, "-"+f.Name+"="+f.Value.String())
			}
		})
		if c.plugin != "" { // given, or kept by restart
			childArgs = append(childArgs, "-s="+c.plugin)
		}
		childArgs = append(childArgs, "-foreground")
		pid, err := ctl.Daemonize(c.files(), childArgs, c.timeout)
		if err != nil {
			return err
		}
		if err := writeStartRecord(c.files().PID, startRecord{Mode: modeName, Plugin: absPath(c.plugin)}); err != nil {
			say("WARNING: %v (restart will need the mode again)", err)
		}
		say("metaq-server started (pid %d), log %s", pid, c.files().Log)
		return nil
	}

	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	removePID, err := ctl.WritePID(c.files().PID)
	if err != nil {
		return err
	}
	defer removePID()
	if keepGCFloor(c.gcFloor) {
		logger.Debug("metaq-server: garbage collector heap floor", "mib", c.gcFloor)
	}
	b, err := bundle.New(bundle.Options{
		ConfigPath: c.config,
		Mode:       mode,
		PluginPath: c.plugin,
		Logger:     logger,
		ListenAddr: c.listen,
		AdminAddr:  c.admin,
		DataPath:   c.dataPath,

		AllowUnknown: c.allowUnk,
	})
	if err != nil {
		return err
	}
	b.OnStarted(func() {
		if err := ctl.NotifyReady(); err != nil {
			logger.Warn("metaq-server: cannot report readiness", "err", err)
		}
	})
	stopDumps := dumpStacksOnSIGUSR1(os.Stderr, logger)
	defer stopDumps()
	if err := b.Run(ctx); err != nil {
		logger.Error("metaq-server failed", "err", err)
		return err
	}
	return nil
}

// startRecord is how the running server was started, kept next to its pid
// file so that restart keeps the mode.
type startRecord struct {
	Mode   string `json:"mode,omitempty"`   // slave, samsa, gregor; "" for a master
	Plugin string `json:"plugin,omitempty"` // -s, absolute
}

func (r startRecord) String() string {
	mode := r.Mode
	if mode == "" {
		mode = "master"
	}
	if r.Plugin != "" {
		return mode + " -s " + r.Plugin
	}
	return mode
}

func startRecordPath(pidFile string) string { return pidFile + ".start" }

func writeStartRecord(pidFile string, r startRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.WriteFile(startRecordPath(pidFile), b, 0o644); err != nil {
		return fmt.Errorf("record the start mode: %w", err)
	}
	return nil
}

func readStartRecord(pidFile string) (startRecord, error) {
	var r startRecord
	b, err := os.ReadFile(startRecordPath(pidFile))
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}

func absPath(p string) string {
	if p == "" {
		return ""
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

func status(ctx context.Context, c *common) error {
	pid, err := ctl.ReadPID(c.files().PID)
	if errors.Is(err, ctl.ErrNotRunning) && c.logDir == "" && c.pidFile == "" {
		// No pid file where this configuration's would be by default: the
		// server may have been started with another -logdir. Ask the
		// admin endpoint the configuration names which file it runs.
		if found, ferr := runningFromAdmin(ctx, c); ferr == nil {
			pid, err = found, nil
		}
	}
	if err != nil {
		if errors.Is(err, ctl.ErrNotRunning) {
			say("metaq-server is not running")
			return exitCode(1)
		}
		return err
	}
	if !c.json {
		say("metaq-server is running (pid %d)", pid)
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	body, err := ctl.NewAdmin(cfg).Do(ctx, "GET", "/status", nil)
	switch {
	case err != nil:
		say("admin endpoint: %v", err)
	case c.json:
		fmt.Print(body)
	default:
		return printStatusSummary(os.Stdout, []byte(body))
	}
	return nil
}

// runningFromAdmin returns the pid of the server that answers on the admin
// endpoint c's configuration names, if it runs that same configuration
// file and that process is alive.
func runningFromAdmin(ctx context.Context, c *common) (int, error) {
	cfg, err := c.load()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	body, err := ctl.NewAdmin(cfg).Do(ctx, "GET", "/status", nil)
	if err != nil {
		return 0, err
	}
	var st struct {
		PID        int    `json:"pid"`
		ConfigFile string `json:"configFile"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return 0, fmt.Errorf("admin /status: %w", err)
	}
	if !sameFile(st.ConfigFile, c.config) || st.PID <= 0 || syscall.Kill(st.PID, 0) != nil {
		return 0, fmt.Errorf("the server on the admin endpoint runs %s (pid %d), not %s", st.ConfigFile, st.PID, c.config)
	}
	return st.PID, nil
}

// sameFile reports whether paths a and b name the same file.
func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

func reload(ctx context.Context, c *common) error {
	cfg, err := c.load()
	if err != nil {
		return fmt.Errorf("the new configuration does not load, nothing reloaded: %w", err)
	}
	body, err := ctl.NewAdmin(cfg).Do(ctx, "POST", "/reload", nil)
	if err == nil {
		fmt.Print(body)
		return nil
	}
	// No admin endpoint: fall back to SIGHUP; the result is in the log.
	pid, serr := ctl.Signal(c.files().PID, syscall.SIGHUP)
	if serr != nil {
		return errors.Join(err, serr)
	}
	say("sent SIGHUP to metaq-server (pid %d); see %s", pid, c.files().Log)
	return nil
}

func adminCall(ctx context.Context, c *common, method, path string, q url.Values) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	body, err := ctl.NewAdmin(cfg).Do(ctx, method, path, q)
	if err != nil {
		return err // it carries the answer's text: printed once
	}
	fmt.Print(body)
	return nil
}

// refuseUnknown is the start check on unknown keys and sections (the bundle
// makes it again): refused unless -allow-unknown, or the file is the
// version configsync applied here.
func refuseUnknown(c *common, cfg *config.Server, warnings []config.Warning) error {
	if err := config.CheckUnknown(warnings); err != nil && !c.allowUnk && !configsync.AppliedHere(c.config, cfg.Raw) {
		return fmt.Errorf("%w\n(fix the file, or pass -allow-unknown to run it anyway)", err)
	}
	return nil
}

func check(c *common) error {
	cfg, warnings, err := config.Load(c.config)
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "warning: "+w.String())
	}
	if err != nil {
		return err
	}
	if err := config.CheckUnknown(warnings); err != nil && !c.allowUnk {
		return fmt.Errorf("%w\n(fix the file, or pass -allow-unknown to accept it)", err)
	}
	// The key file is read at start; a missing or readable-by-all one would
	// stop the bundle there.
	if _, err := bundle.ReplicationSecrets(cfg); err != nil {
		return err
	}
	var slave *config.Slave
	if c.plugin != "" {
		slave, warnings, err = config.LoadSlave(c.plugin)
		for _, w := range warnings {
			fmt.Fprintln(os.Stderr, "warning: "+w.String())
		}
		if err != nil {
			return err
		}
		if err := config.CheckUnknown(warnings); err != nil && !c.allowUnk {
			return fmt.Errorf("%w\n(fix the file, or pass -allow-unknown to accept it)", err)
		}
	}
	return config.Describe(os.Stdout, cfg, slave)
}
