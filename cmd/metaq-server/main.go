// Command metaq-server runs and operates a broker bundle, with the commands
// of MetaQ's bin/metaServer.sh (spec §8):
//
//	metaq-server start [slave|samsa|gregor] -f server.ini [-s props] [--foreground]
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
//
// There is no JMX: stop is SIGTERM (a clean stop), reload is the admin
// endpoint or SIGHUP, and the partition and status commands use the admin
// endpoint on 127.0.0.1:<serverPort+2>.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/broker/config"
	"metaq/cmd/metaq-server/bundle"
	"metaq/cmd/metaq-server/ctl"
)

const usage = `usage: metaq-server <command> [arguments]

commands:
  start [slave|samsa|gregor] -f server.ini [-s file] [--foreground]
  stop | restart | status | reload        -f server.ini
  stats [-item X]                         -f server.ini
  slave-status                            -f server.ini
  promote [--force]                       -f server.ini (at a slave site: become master)
  unreplicated [-publish [-brokers h:p]]  -f server.ini (records a former master cut and saved aside)
  switchover -to <slave> [-follow addr]   -f server.ini (at the master: hand over to a slave, nothing lost, then follow it)
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
		os.Exit(2)
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

// common holds the flags every command shares.
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
	to       string
	follow   string
	publish  bool
	brokers  string
	part     int
	from     string
}

func newFlags(name string) *common {
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs := c.fs
	fs.StringVar(&c.config, "f", "conf/server.ini", "server.ini `path`")
	fs.StringVar(&c.plugin, "s", "", "properties `file` of the mode: async_slave.properties (slave) or samsa_master.properties (samsa)")
	fs.StringVar(&c.logDir, "logdir", "", "log and pid `dir` (default $METAQ_LOG_DIR or <server.ini dir>/../logs)")
	fs.StringVar(&c.pidFile, "pidfile", "", "pid `file` (default <logdir>/.run.pid for conf/server.ini, else <logdir>/.<config name>.run.pid)")
	fs.BoolVar(&c.fg, "foreground", false, "start: run in the foreground instead of detaching")
	fs.BoolVar(&c.verbose, "v", false, "debug logging")
	fs.StringVar(&c.topic, "topic", "", "topic")
	fs.IntVar(&c.start, "start", -1, "first partition")
	fs.IntVar(&c.end, "end", -1, "last partition (inclusive)")
	fs.IntVar(&c.offset, "offset", 0, "move-partitions: number added to each partition number")
	fs.StringVar(&c.item, "item", "", "stats item (topics, offsets, realtime, config, help, reset or a topic)")
	fs.StringVar(&c.group, "group", "", "query: consumer group (default: list groups)")
	fs.IntVar(&c.tries, "tries", 5, "stop: SIGTERM tries before SIGKILL")
	fs.DurationVar(&c.wait, "wait", 3*time.Second, "stop: wait after each try")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "start: how long to wait for the server to answer")
	fs.StringVar(&c.listen, "listen", "", "start: MetaQ protocol listen address (default :<serverPort>)")
	fs.StringVar(&c.admin, "admin", "", `start: admin listen address (default [site] adminAddr; "off" disables)`)
	fs.StringVar(&c.dataPath, "data", "", "start: override [system] dataPath")
	fs.BoolVar(&c.force, "force", false, "promote: even while the master is reachable")
	fs.StringVar(&c.to, "to", "", "switchover: the slave that takes over (slave group, its last '-' field, or slaveId)")
	fs.StringVar(&c.follow, "follow", "", "switchover without ZooKeeper: the new master's replication address, which this master then follows as a slave")
	fs.BoolVar(&c.publish, "publish", false, "unreplicated: publish the saved records again, as new messages")
	fs.StringVar(&c.brokers, "brokers", "", "unreplicated: the master's host:port when ZooKeeper is off")
	fs.IntVar(&c.part, "partition", -1, "repair: partition")
	fs.StringVar(&c.from, "from", "", "repair: MetaQ `address` (host:port) of a replica holding the damaged records")
	return c
}

func (c *common) files() ctl.Files { return ctl.DefaultFiles(c.config, c.logDir, c.pidFile) }

func (c *common) load() (*config.Server, error) {
	cfg, _, err := config.Load(c.config)
	return cfg, err
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func run(cmd string, args []string) error {
	c := newFlags(cmd)
	var mode string
	if cmd == "start" || cmd == "restart" {
		if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			mode, args = args[0], args[1:]
		}
	}
	if err := c.fs.Parse(args); err != nil {
		return err
	}
	if c.fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", c.fs.Args())
	}
	ctx := context.Background()
	switch cmd {
	case "start":
		return start(ctx, c, mode, args)
	case "restart":
		if err := ctl.Stop(ctx, c.files().PID, c.tries, c.wait, say); err != nil && !errors.Is(err, ctl.ErrNotRunning) {
			return err
		}
		return start(ctx, c, mode, args)
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
		return adminCall(ctx, c, "GET", "/slave-status", nil)
	case "unreplicated":
		cfg, err := c.load()
		if err != nil {
			return err
		}
		if c.dataPath != "" {
			cfg.System.DataPath = c.dataPath
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
		return adminCall(ctx, c, "POST", "/switchover", url.Values{"to": {c.to}, "follow": {c.follow}})
	case "promote":
		q := url.Values{}
		if c.force {
			q.Set("force", "true")
		}
		return adminCall(ctx, c, "POST", "/promote", q)
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
		if c.dataPath != "" {
			cfg.System.DataPath = c.dataPath
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
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return exitCode(2)
}

func start(ctx context.Context, c *common, modeName string, args []string) error {
	mode, err := bundle.ParseMode(modeName)
	if err != nil {
		return err
	}
	if !c.fg {
		// Check the configuration here, so that mistakes are printed to the
		// operator and not only into the log.
		if _, _, err := config.Load(c.config); err != nil {
			return err
		}
		childArgs := []string{"start"}
		if modeName != "" {
			childArgs = append(childArgs, modeName)
		}
		childArgs = append(childArgs, args...)
		childArgs = append(childArgs, "--foreground")
		pid, err := ctl.Daemonize(c.files(), childArgs, c.timeout)
		if err != nil {
			return err
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
	b, err := bundle.New(bundle.Options{
		ConfigPath: c.config,
		Mode:       mode,
		PluginPath: c.plugin,
		Logger:     logger,
		ListenAddr: c.listen,
		AdminAddr:  c.admin,
		DataPath:   c.dataPath,
	})
	if err != nil {
		return err
	}
	b.OnStarted(func() {
		if err := ctl.NotifyReady(); err != nil {
			logger.Warn("metaq-server: cannot report readiness", "err", err)
		}
	})
	if err := b.Run(ctx); err != nil {
		logger.Error("metaq-server failed", "err", err)
		return err
	}
	return nil
}

func status(ctx context.Context, c *common) error {
	pid, err := ctl.ReadPID(c.files().PID)
	if err != nil {
		if errors.Is(err, ctl.ErrNotRunning) {
			say("metaq-server is not running")
			return exitCode(1)
		}
		return err
	}
	say("metaq-server is running (pid %d)", pid)
	if cfg, err := c.load(); err == nil {
		if body, err := ctl.NewAdmin(cfg).Do(ctx, "GET", "/status", nil); err == nil {
			fmt.Print(body)
		} else {
			say("admin endpoint: %v", err)
		}
	}
	return nil
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
	fmt.Print(body)
	return err
}

func check(c *common) error {
	cfg, warnings, err := config.Load(c.config)
	for _, w := range warnings {
		fmt.Fprintln(os.Stderr, "warning: "+w.String())
	}
	if err != nil {
		return err
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
	}
	return config.Describe(os.Stdout, cfg, slave)
}
