package bundle

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// parallelTests is how many tests marked t.Parallel run at once unless
// -parallel is given. Most tests here wait (ZooKeeper sessions, gossip
// suspicion, take-over holds, back-offs) and use about a sixth of a core
// between them; go test's default, GOMAXPROCS (2 on CI's machine), would
// leave the package's wall time near the sum of their waits.
//
// Tests that set a package variable (raiseTimeout, repairInterval,
// keepPublishedEvery, reprobeEvery, slaveRegisterPatience), count the
// process's goroutines, run the Java client, or need a quiet start-up
// (TestGatewaySwitchover) stay sequential: go test runs them all before the
// parallel ones start.
const parallelTests = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(parallelTests)); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
