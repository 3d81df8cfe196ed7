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
// logged and changes nothing).
func (b *Bundle) Run(ctx context.Context) error {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := b.Start(ctx); err != nil {
		return err
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
