// Command metaq-demo starts the three-site seed deployment on this machine
// and walks through what the project does: bj is the master site, hf and gz
// are async-slave sites, each one full bundle (broker, replication,
// configsync agent, gossip member, dashboard) in this process, with an
// emulated WAN (30 ms each way) between the sites.
//
//	go run ./cmd/metaq-demo            # run the tour, then keep running; Ctrl-C stops
//	go run ./cmd/metaq-demo -once     # run the tour and exit
//	go run ./cmd/metaq-demo -once -failover   # then site failover, step by step
//
// -failover adds, after the tour, what an operator runs when a site is
// lost (failover.go): a switchover to hf and back with a producer running,
// the loss of bj with hf promoted, and bj's return as a slave of hf with
// its unreplicated tail saved aside; every step checks what it prints. In
// the netns mode it runs the metaq-server commands inside the sites'
// namespaces and kills bj's server with SIGKILL.
//
// It needs nothing installed: ZooKeeper is off (the slaves find the master
// by masterAddress) and bj runs an embedded NATS server for configsync.
// Every site's config set is written under -dir (default ./demo-data), and
// each bundle logs to <dir>/<site>/bundle.log.
//
// Run as root with `ip netns` (and tc for the rate cap), the demo puts
// each site in its own network namespace instead (198.18.0.1-3, joined by
// links with 30 ms one-way delay and a 50 Mbit/s cap), runs each bundle as
// a metaq-server child process, and forwards the dashboards to 127.0.0.1.
// -no-netns keeps the in-process mode; the demo says why when it falls
// back to it. The children die with the demo even when it is killed
// (parent-death signal), and so do the WAN relays (internal/wan, in the
// demo's own process); namespaces left by a killed demo are removed by the
// next start in the same -dir.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"metaq/internal/cli"
)

func main() {
	if internalMain(os.Args[1:]) {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// After the first signal the demo stops cleanly; a second one gets
		// the default action and ends the process at once.
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil && !errors.Is(err, flag.ErrHelp) && !errors.As(err, new(cli.UsageError)) {
		fmt.Fprintln(os.Stderr, "metaq-demo:", err)
	}
	if code := cli.ExitCode(err); code != 0 {
		stop()
		os.Exit(code)
	}
}

// run parses flags, starts the sites, runs the tour and, unless -once,
// keeps printing the lag report until ctx ends. Everything it started is
// stopped before it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	fs := flag.NewFlagSet("metaq-demo", flag.ContinueOnError)
	o := defaultOptions()
	fs.StringVar(&o.Dir, "dir", o.Dir, "folder for the sites' config sets, data and logs (recreated at start)")
	fs.IntVar(&o.BasePort, "base-port", o.BasePort, "bj's serverPort; hf and gz use +10 and +20, each site also +1..+4 and its dashboard at -3 (0 = free ports)")
	fs.BoolVar(&o.Once, "once", false, "run the tour and exit")
	fs.BoolVar(&o.Failover, "failover", false, "after the tour, show site failover: switchover to hf and back with a producer running, bj lost and hf promoted, bj back as hf's slave")
	fs.IntVar(&o.Messages, "messages", o.Messages, "sample messages produced at bj")
	fs.DurationVar(&o.WANDelay, "wan-delay", o.WANDelay, "one-way delay added between sites")
	fs.DurationVar(&o.Every, "every", o.Every, "how often the lag report is printed while running")
	fs.BoolVar(&o.NoNetns, "no-netns", false, "run the sites in this process even when network namespaces are available")
	fs.StringVar(&o.Loss, "loss", o.Loss, "netns mode: packet loss on each WAN link, in percent")
	fs.StringVar(&o.Rate, "rate", o.Rate, "netns mode: bandwidth cap of each WAN link (tc syntax; 0 = none)")
	fs.StringVar(&o.ServerBin, "server-bin", "", "netns mode: metaq-server binary to run (default: built from this module into a temporary folder)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: metaq-demo [-once] [-failover] [-dir ./demo-data] [-base-port 8123] [-messages 1000] [-wan-delay 30ms] [-no-netns] [-loss 0]")
		fs.PrintDefaults()
	}
	if len(args) > 0 && cli.IsHelp(args[0]) {
		args = []string{"-h"}
	}
	if err := cli.Parse(fs, args, false, stdout, stderr); err != nil {
		return err
	}
	if _, err := strconv.ParseFloat(o.Loss, 64); err != nil {
		return fmt.Errorf("-loss %q: a percentage such as 0 or 0.5", o.Loss)
	}
	var d runner
	if ns, why := netnsUsable(o); ns {
		nd, err := startNetnsDemo(ctx, o, stdout)
		if err != nil {
			return err
		}
		d = nd
	} else {
		fmt.Fprintf(stdout, "network namespaces: off (%s); the sites run in this process behind an in-process WAN proxy\n", why)
		pd, err := startDemo(ctx, o, stdout)
		if err != nil {
			return err
		}
		d = pd
	}
	var closeErr error
	defer func() {
		fmt.Fprintln(stdout, "stopping the three sites...")
		if closeErr = d.Close(); closeErr != nil {
			fmt.Fprintln(stderr, "metaq-demo: close:", closeErr)
			if err == nil {
				err = closeErr
			}
		}
		fmt.Fprintln(stdout, "stopped; config sets and logs are in", d.Dir())
	}()
	if err := d.Tour(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // interrupted during the tour: a normal stop
		}
		return err
	}
	if o.Failover {
		if err := d.Failover(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	if o.Once {
		return nil
	}
	fmt.Fprintf(stdout, "\nRunning: bj takes a few messages a second; the lag report follows every %v. Ctrl-C stops everything.\n", o.Every)
	d.Follow(ctx)
	return nil
}

// runner is a started demo: in process or in network namespaces.
type runner interface {
	Tour(ctx context.Context) error
	// Failover runs the -failover steps after the tour.
	Failover(ctx context.Context) error
	Follow(ctx context.Context)
	Close() error
	Dir() string
}

// Options configure the demo.
type Options struct {
	Dir      string
	BasePort int
	Once     bool
	// Failover adds the site failover steps after the tour.
	Failover bool
	Messages int
	WANDelay time.Duration
	Every    time.Duration
	// NoNetns keeps the in-process mode even as root.
	NoNetns bool
	// Loss (percent) and Rate (tc syntax) shape the netns mode's links.
	Loss string
	Rate string
	// ServerBin is a prebuilt metaq-server (netns mode).
	ServerBin string
}

func defaultOptions() Options {
	return Options{Dir: "demo-data", BasePort: 8123, Messages: 1000, WANDelay: 30 * time.Millisecond, Every: 5 * time.Second,
		Loss: "0", Rate: "50mbit"}
}
