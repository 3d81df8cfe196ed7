package faultsched

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// needs skips the test without METAQ_TEST_ZK (as the other integration
// tests do), and fails it under CI=true when a tool the harness needs is
// missing: ZooKeeper's jar, java, openssl, bash.
func needs(t *testing.T) {
	t.Helper()
	if os.Getenv("METAQ_TEST_ZK") == "" {
		t.Skip("METAQ_TEST_ZK is not set: the fault schedules need ZooKeeper's jar and openssl, as CI has them")
	}
	var missing []string
	for _, tool := range []string{"java", "openssl", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := os.Stat("/usr/share/java/zookeeper.jar"); err != nil {
		missing = append(missing, "/usr/share/java/zookeeper.jar")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the fault schedules need %v", missing)
		}
		t.Skipf("the fault schedules need %v", missing)
	}
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// buildBin builds the harness's commands (BuildBin) once for the package's tests.
func buildBin(t *testing.T) (bin, repo string) {
	t.Helper()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "faultsched-bin-")
		if binErr != nil {
			return
		}
		binErr = BuildBin(repo, binDir)
	})
	if binErr != nil {
		t.Fatalf("build metaq-server: %v", binErr)
	}
	return binDir, repo
}

func TestMain(m *testing.M) {
	if os.Getenv(blockedSiteEnv) != "" {
		blockLikeAHungSite()
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// regressions reads a file of testdata: "seed seconds kinds" lines.
func regressions(t *testing.T, name string) []Options {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Options
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			t.Fatalf("regressions.txt: %q: want seed seconds kinds", line)
		}
		seed, err1 := strconv.ParseUint(fs[0], 10, 64)
		secs, err2 := strconv.Atoi(fs[1])
		kinds, err3 := ParseKinds(fs[2])
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("regressions.txt: %q: %v %v %v", line, err1, err2, err3)
		}
		out = append(out, Options{Seed: seed, Duration: time.Duration(secs) * time.Second, Kinds: kinds})
	}
	return out
}

// TestSchedules runs the fixed short schedules of testdata/regressions.txt
// against three metaq-server processes and fails on any violation, printing
// the seed and where the history and fault log were written. With
// FAULTSCHED_LONG=1 it runs testdata/regressions-long.txt too: the seeds
// that found a (fixed) violation, too long or too eventful for the suite's
// budget (a repair waits for the master's repair interval, a minute).
func TestSchedules(t *testing.T) {
	needs(t)
	bin, repo := buildBin(t)
	keep := os.Getenv("FAULTSCHED_DIR")
	runs := regressions(t, "regressions.txt")
	if os.Getenv("FAULTSCHED_LONG") != "" {
		runs = append(runs, regressions(t, "regressions-long.txt")...)
	}
	for _, o := range runs {
		t.Run(strconv.FormatUint(o.Seed, 10), func(t *testing.T) {
			o.Bin, o.Repo = bin, repo
			o.ConvergeBound = 90 * time.Second
			o.Dir, o.Keep = keep, keep != ""
			if o.Dir == "" {
				d, err := os.MkdirTemp("", "faultsched-")
				if err != nil {
					t.Fatal(err)
				}
				o.Dir = d
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			res, err := Run(ctx, o)
			if err != nil {
				t.Fatalf("seed %d: %v", o.Seed, err)
			}
			t.Log(res.Summary())
			if res.Failed() {
				for i, v := range res.Violations {
					if i == 20 {
						t.Errorf("... %d more in %s/violations.txt", len(res.Violations)-20, res.Dir)
						break
					}
					t.Errorf("%s: %s", v.Kind, v.Detail)
				}
				t.Errorf("seed %d failed; replay: go run ./cmd/metaq-soak -seed %d -schedule %v -kinds %s; history and fault log in %s",
					o.Seed, o.Seed, o.Duration, kindsArg(o.Kinds), res.Dir)
			} else if keep == "" {
				os.RemoveAll(o.Dir)
			}
		})
	}
}

func kindsArg(ks []Kind) string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return strings.Join(s, ",")
}
