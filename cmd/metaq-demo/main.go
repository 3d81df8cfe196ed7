// Command metaq-demo starts the three-site seed deployment on this machine
// and walks through what the project does: bj is the master site, hf and gz
// are async-slave sites, each one full bundle (broker, replication,
// configsync agent, gossip member, dashboard) in this process, with an
// emulated WAN (30 ms each way) between the sites.
//
//	go run ./cmd/metaq-demo            # run the tour, then keep running; Ctrl-C stops
//	go run ./cmd/metaq-demo --once     # run the tour and exit
//
// It needs nothing installed: ZooKeeper is off (the slaves find the master
// by masterAddress) and bj runs an embedded NATS server for configsync.
// Every site's config set is written under --dir (default ./demo-data), and
// each bundle logs to <dir>/<site>/bundle.log.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the demo stops cleanly; a second one gets
		// the default action and ends the process at once.
		<-ctx.Done()
		stop()
	}()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "metaq-demo:", err)
		os.Exit(1)
	}
}

// run parses flags, starts the sites, runs the tour and, unless --once,
// keeps printing the lag report until ctx ends. Everything it started is
// stopped before it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("metaq-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := defaultOptions()
	fs.StringVar(&o.Dir, "dir", o.Dir, "folder for the sites' config sets, data and logs (recreated at start)")
	fs.IntVar(&o.BasePort, "base-port", o.BasePort, "bj's serverPort; hf and gz use +10 and +20, each site also +1..+4 and its dashboard at -3 (0 = free ports)")
	fs.BoolVar(&o.Once, "once", false, "run the tour and exit")
	fs.IntVar(&o.Messages, "messages", o.Messages, "sample messages produced at bj")
	fs.DurationVar(&o.WANDelay, "wan-delay", o.WANDelay, "one-way delay added between sites")
	fs.DurationVar(&o.Every, "every", o.Every, "how often the lag report is printed while running")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: metaq-demo [--once] [--dir ./demo-data] [--base-port 8123] [--messages 1000] [--wan-delay 30ms]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, err := startDemo(ctx, o, stdout)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stdout, "stopping the three sites...")
		if err := d.Close(); err != nil {
			fmt.Fprintln(stderr, "metaq-demo: close:", err)
		}
		fmt.Fprintln(stdout, "stopped; config sets and logs are in", d.dir)
	}()
	if err := d.Tour(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted during the tour: a normal stop
		}
		return err
	}
	if o.Once {
		return nil
	}
	fmt.Fprintf(stdout, "\nRunning: bj takes a few messages a second; the lag report follows every %v. Ctrl-C stops everything.\n", o.Every)
	d.Follow(ctx)
	return nil
}

// Options configure the demo.
type Options struct {
	Dir      string
	BasePort int
	Once     bool
	Messages int
	WANDelay time.Duration
	Every    time.Duration
}

func defaultOptions() Options {
	return Options{Dir: "demo-data", BasePort: 8123, Messages: 1000, WANDelay: 30 * time.Millisecond, Every: 5 * time.Second}
}
