//go:build !race

package main

// raceOn: the race detector is on (its shadow memory faults in with every
// new heap page, so page fault counts mean nothing).
const raceOn = false
