package bundle

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// OnStarted sets a function Run calls once Start has succeeded (a daemon's
// start-up report). Call it before Run.
func (b *Bundle) OnStarted(fn func()) { b.onStarted = fn }

// Run starts the bundle and serves until ctx ends or SIGTERM/SIGINT arrives,
// then stops it cleanly. SIGHUP reloads server.ini (a failed reload is
// logged and changes nothing). A stop while Start still runs (it waits for
// a ZooKeeper ensemble that is down) ends Start and returns nil.
func (b *Bundle) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// Start may wait long (for a ZooKeeper ensemble that is down): a
	// SIGTERM or SIGINT meanwhile ends it, and the stop is clean.
	startCtx, cancelStart := context.WithCancel(ctx)
	defer cancelStart()
	started := make(chan error, 1)
	go func() { started <- b.Start(startCtx) }()
	var stopSig os.Signal
	for waiting := true; waiting; {
		select {
		case err := <-started:
			switch {
			case stopSig != nil && err != nil:
				// Start closed what it had started.
				b.log.Info("BUNDLE: stopped while starting", "signal", stopSig.String(), "start", err)
				return nil
			case ctx.Err() != nil && err != nil:
				b.log.Info("BUNDLE: stopped while starting", "reason", ctx.Err(), "start", err)
				return nil
			case stopSig != nil:
				b.log.Info("BUNDLE: stopping", "signal", stopSig.String())
				return b.Close()
			case err != nil:
				return err
			}
			waiting = false
		case s := <-sigs:
			if s == syscall.SIGHUP {
				b.log.Warn("BUNDLE: SIGHUP while starting ignored: nothing to reload yet")
				continue
			}
			if stopSig == nil {
				b.log.Info("BUNDLE: stopping while starting", "signal", s.String())
				stopSig = s
				cancelStart()
			}
		}
	}
	if b.onStarted != nil {
		b.onStarted()
	}
	for {
		select {
		case <-ctx.Done():
			b.log.Info("BUNDLE: stopping", "reason", ctx.Err())
			return b.Close()
		case s := <-sigs:
			if s == syscall.SIGHUP {
				if _, err := b.Reload(ctx); err != nil {
					b.log.Error("BUNDLE: reload failed, keeping the running configuration", "err", err)
				}
				continue
			}
			b.log.Info("BUNDLE: stopping", "signal", s.String())
			return b.Close()
		}
	}
}
