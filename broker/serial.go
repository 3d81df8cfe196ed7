package broker

import (
	"sync"
	"sync/atomic"
)

// serialQueues runs the jobs queued under one key one after another, in
// the order queued, on one goroutine per key that has jobs; jobs of
// different keys run concurrently. The goroutine takes every job queued
// so far (at most max) at once, so a run that waits lets the jobs queued
// meanwhile go together in the next. A key's goroutine exits once its
// queue is empty. The put route uses it to keep a partition's order where
// a step may wait: a topic's registration (per connection) and a
// synchronous slave's round trips (per partition).
type serialQueues[K comparable, J any] struct {
	run func(K, []J)    // runs jobs, in order
	max int             // jobs per run
	wg  *sync.WaitGroup // counts the goroutines

	mu sync.Mutex
	m  map[K][]J // queued, not yet running; a key is present while its goroutine runs
	// keys is len(m), changed under mu: a push that need not wait finds
	// no queue at all without taking mu (the usual case: a read's puts to
	// many partitions, none of whose topics is still being registered).
	keys atomic.Int32
}

func newSerialQueues[K comparable, J any](wg *sync.WaitGroup, max int, run func(K, []J)) *serialQueues[K, J] {
	return &serialQueues[K, J]{run: run, max: max, wg: wg, m: make(map[K][]J)}
}

// idle reports that no key has jobs: push with mustWait false would queue
// nothing and return false.
func (q *serialQueues[K, J]) idle() bool { return q.keys.Load() == 0 }

// push queues j behind key's earlier jobs. When key has no jobs and
// mustWait is false it queues nothing and returns false: the caller runs j
// itself, and nothing of key's can run before it.
func (q *serialQueues[K, J]) push(key K, j J, mustWait bool) bool {
	if !mustWait && q.keys.Load() == 0 {
		return false
	}
	q.mu.Lock()
	jobs, busy := q.m[key]
	if !busy && !mustWait {
		q.mu.Unlock()
		return false
	}
	q.m[key] = append(jobs, j)
	if !busy {
		q.keys.Add(1)
	}
	q.mu.Unlock()
	if !busy {
		q.wg.Add(1)
		go q.drain(key)
	}
	return true
}

// drain runs key's jobs until its queue is empty, then removes the key:
// every job it took has run by then, so whatever comes for key afterwards
// comes after them.
func (q *serialQueues[K, J]) drain(key K) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		jobs := q.m[key]
		if len(jobs) == 0 {
			delete(q.m, key)
			q.keys.Add(-1)
			q.mu.Unlock()
			return
		}
		n := min(len(jobs), q.max)
		if n == len(jobs) {
			q.m[key] = nil // still present: the key's goroutine runs
		} else {
			q.m[key] = jobs[n:]
		}
		q.mu.Unlock()
		q.run(key, jobs[:n:n])
	}
}
