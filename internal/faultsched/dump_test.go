package faultsched

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockedSiteEnv makes the test binary, started as a site's process, block
// like a site that stopped answering.
const blockedSiteEnv = "FAULTSCHED_BLOCKED_SITE"

// blockLikeAHungSite parks one goroutine on a lock that is never released,
// as a deadlocked server would, and never returns.
func blockLikeAHungSite() {
	var mu sync.Mutex
	mu.Lock()
	go func() {
		mu.Lock() // never granted
	}()
	os.Stdout.WriteString("blocked\n")
	time.Sleep(time.Hour)
	os.Exit(0)
}

// TestDumpWritesTheStacksOfAHungSite: Dump makes a site's process print its
// goroutines into the site's log and exit, and that exit is not reported as
// the process exiting by itself.
func TestDumpWritesTheStacksOfAHungSite(t *testing.T) {
	t.Setenv(blockedSiteEnv, "1")
	c := NewCluster(&Layout{Dir: t.TempDir()}, "", "")
	if err := c.startProgram("gz", os.Args[0], "-test.run=^$"); err != nil {
		t.Fatal(err)
	}
	// Once it says so, its runtime answers SIGQUIT (before, the signal's
	// default action would end it without stacks).
	logPath := c.L.SiteDir("gz") + "/logs/server.out"
	for deadline := time.Now().Add(time.Minute); ; {
		if b, _ := os.ReadFile(logPath); strings.Contains(string(b), "blocked\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the blocked site never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Pause("gz", true); err != nil { // a paused site is dumped too
		t.Fatal(err)
	}
	log, err := c.Dump("gz")
	if err != nil {
		t.Fatal(err)
	}
	if c.Running("gz") {
		t.Fatal("gz still runs after the dump")
	}
	out, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "SIGQUIT") || !strings.Contains(string(out), "blockLikeAHungSite") {
		t.Fatalf("the log holds no goroutine stacks:\n%s", out)
	}
	if ex := c.Exits(); len(ex) != 0 {
		t.Fatalf("a dumped site counted as exiting by itself: %v", ex)
	}
	if _, err := c.Dump("gz"); err == nil {
		t.Fatal("a dump of a site that does not run succeeded")
	}
}
