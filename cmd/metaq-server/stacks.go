package main

import (
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
)

// dumpStacksOnSIGUSR1 writes every goroutine's stack to w at each SIGUSR1
// and lets the server go on (Go's runtime prints them at SIGQUIT too, but
// exits): a server that stops answering shows where it waits without
// being stopped. The function it returns stops the dumps.
func dumpStacksOnSIGUSR1(w io.Writer, log *slog.Logger) (stop func()) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-sigs:
				log.Warn("metaq-server: SIGUSR1: every goroutine's stack follows; the server goes on")
				if err := pprof.Lookup("goroutine").WriteTo(w, 2); err != nil {
					log.Error("metaq-server: writing the goroutines' stacks failed", "err", err)
				}
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
	}
}
