// Command metaq is a command-line client for MetaQ brokers built on
// broker/client: produce, consume, fetch, find a message by id, list topics
// and partitions, and show or reset group offsets.
//
//	metaq [global flags] <command> [flags]
//
// Global flags (before or after the command): -zk host:port[,host:port],
// -root /meta, -brokers host:port[,...] (without ZooKeeper).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"metaq/broker/client"
	"metaq/internal/cli"
)

// command is one subcommand. Other files of this package add theirs to
// commands in an init function (lag.go adds "lag").
type command struct {
	summary string
	run     func(ctx context.Context, g *globals, args []string) error
}

var commands = map[string]command{
	"produce":    {"send stdin lines or generated messages", runProduce},
	"consume":    {"consume a topic to stdout (group or broadcast)", runConsume},
	"fetch":      {"fetch one partition from an offset or a time", runFetch},
	"find":       {"find a message by its id (needs wall-clock ids: this project's brokers, not Java 1.4.6)", runFind},
	"topics":     {"list topics and their brokers", runTopics},
	"partitions": {"list a topic's partitions with min and max offsets", runPartitions},
	"offsets":    {"show or reset a group's offsets", runOffsets},
}

// globals are the connection flags every command accepts.
type globals struct {
	zk      string
	root    string
	brokers string
	verbose bool
	stdout  io.Writer
	stderr  io.Writer
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.zk, "zk", g.zk, "ZooKeeper servers, comma separated (zk.zkConnect)")
	fs.StringVar(&g.root, "root", g.root, "ZooKeeper root (zk.zkRoot)")
	fs.StringVar(&g.brokers, "brokers", g.brokers, "static brokers host:port,...: no ZooKeeper (partition -1 on produce; fetch, find and partitions name each broker by the brokerId it reports)")
	fs.BoolVar(&g.verbose, "v", g.verbose, "log client state changes to stderr")
}

func (g *globals) client(ctx context.Context) (*client.Client, error) {
	cfg := client.Config{ZKRoot: g.root}
	if g.brokers != "" {
		cfg.Brokers = strings.Split(g.brokers, ",")
	} else {
		cfg.ZKServers = strings.Split(g.zk, ",")
	}
	if g.verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(g.stderr, nil))
	}
	return client.New(ctx, cfg)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	// A usage error has been written already, with the usage.
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.As(err, new(cli.UsageError)) {
		fmt.Fprintln(os.Stderr, "metaq:", err)
	}
	os.Exit(cli.ExitCode(err))
}

var stdin io.Reader = os.Stdin

func run(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) error {
	stdin = in
	g := &globals{zk: os.Getenv("METAQ_ZK"), root: "/meta", stdout: out, stderr: errw}
	if g.zk == "" {
		g.zk = "127.0.0.1:2181"
	}
	fs := flag.NewFlagSet("metaq", flag.ContinueOnError)
	g.register(fs)
	fs.Usage = func() { usage(fs.Output(), fs) }
	if err := cli.Parse(fs, args, true, out, errw); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		usage(errw, fs)
		fmt.Fprintln(errw, "metaq: no command")
		return cli.UsageError{Err: errors.New("no command")}
	}
	name := fs.Arg(0)
	if cli.IsHelp(name) {
		usage(out, fs)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		usage(errw, fs)
		err := fmt.Errorf("unknown command %q", name)
		fmt.Fprintln(errw, "metaq:", err)
		return cli.UsageError{Err: err}
	}
	return cmd.run(ctx, g, fs.Args()[1:])
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: metaq [global flags] <command> [flags]   (metaq <command> -h: the command's flags)\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nglobal flags:")
	out := fs.Output()
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(out)
}

// newFlags makes a subcommand's flag set that also takes the global flags.
func newFlags(g *globals, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("metaq "+name, flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	g.register(fs)
	return fs
}

// parse parses a subcommand's flags (cli.Parse: help on stdout, no words
// after the flags).
func (g *globals) parse(fs *flag.FlagSet, args []string) error {
	return cli.Parse(fs, args, false, g.stdout, g.stderr)
}

// parseWithTopic parses a command's flags and requires -topic.
func (g *globals) parseWithTopic(fs *flag.FlagSet, args []string, name string, topic *string) error {
	if err := g.parse(fs, args); err != nil {
		return err
	}
	if *topic == "" {
		return fmt.Errorf("%s: -topic is required", name)
	}
	return nil
}

// parseTime accepts RFC 3339, "2006-01-02 15:04:05" (local), a Unix time
// in milliseconds, or a duration before now such as "-10m" or "1h".
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation("2006-01-02 15:04:05", s, time.Local); err == nil {
		return t, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil {
		return time.Now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("bad time %q (RFC 3339, \"2006-01-02 15:04:05\", unix ms, or a duration ago like 10m)", s)
}

// parseStart parses earliest, latest, offset:N or time:T.
func parseStart(s string) (client.StartPosition, error) {
	switch {
	case s == "" || s == "earliest":
		return client.StartEarliest(), nil
	case s == "latest":
		return client.StartLatest(), nil
	case strings.HasPrefix(s, "offset:"):
		n, err := strconv.ParseInt(s[len("offset:"):], 10, 64)
		if err != nil {
			return client.StartPosition{}, fmt.Errorf("bad start %q", s)
		}
		return client.StartAt(n), nil
	case strings.HasPrefix(s, "time:"):
		t, err := parseTime(s[len("time:"):])
		if err != nil {
			return client.StartPosition{}, err
		}
		return client.StartAtTime(t), nil
	}
	return client.StartPosition{}, fmt.Errorf("bad start %q (earliest, latest, offset:N, time:T)", s)
}

// progress prints a one-line status to w at most once a second.
type progress struct {
	w     io.Writer
	start time.Time
	last  time.Time
	on    bool
}

func newProgress(w io.Writer, on bool) *progress {
	return &progress{w: w, start: time.Now(), on: on}
}

func (p *progress) update(format string, n int64, extra string) {
	if !p.on || time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	rate := float64(n) / time.Since(p.start).Seconds()
	fmt.Fprintf(p.w, "\r"+format+" %d (%.0f/s)%s   ", n, rate, extra)
}

func (p *progress) done(format string, n int64, extra string) {
	if !p.on {
		return
	}
	rate := float64(n) / max(time.Since(p.start).Seconds(), 1e-9)
	fmt.Fprintf(p.w, "\r"+format+" %d (%.0f/s)%s   \n", n, rate, extra)
}

func formatMessage(m *client.Message, full bool) string {
	if !full {
		return string(m.Payload)
	}
	attr := ""
	if m.HasAttribute {
		attr = " attr=" + strconv.Quote(m.Attribute)
	}
	return fmt.Sprintf("%s %s offset=%d id=%d time=%s%s %s", m.Topic, m.Partition, m.Offset, m.ID,
		m.Time().UTC().Format(time.RFC3339Nano), attr, m.Payload)
}
