// Package routines tracks the goroutines a component owns, so that its
// Close can stop starting new ones and then wait for every one it started.
package routines

import "sync"

// Group is the set of goroutines one owner started. The zero value is ready
// to use.
type Group struct {
	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
}

// Go runs f in a new goroutine of the group unless Stop has been called,
// and reports whether it did.
func (g *Group) Go(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return false
	}
	g.wg.Go(f)
	return true
}

// Stop makes every later Go start nothing, so that Wait cannot miss a
// goroutine started while it waits.
func (g *Group) Stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// Wait waits for every goroutine Go started. Call Stop first.
func (g *Group) Wait() { g.wg.Wait() }
