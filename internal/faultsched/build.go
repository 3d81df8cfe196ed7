package faultsched

import (
	"fmt"
	"os/exec"
)

// BuildBin builds into bin what the harness runs: metaq-server, configsync
// and nats-server (the NATS server of the push fault, from the module's
// own dependency, as local-three-sites.sh builds it).
func BuildBin(repo, bin string) error {
	for _, args := range [][]string{
		{"build", "-o", bin + "/", "./cmd/metaq-server", "./cmd/configsync", "./cmd/metaq"},
		{"build", "-o", bin + "/nats-server", "github.com/nats-io/nats-server/v2"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("faultsched: go %v: %w\n%s", args, err, out)
		}
	}
	return nil
}
