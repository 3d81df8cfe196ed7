package testutil

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"metaq/internal/diskfill"
)

// FillDisk takes every free page of the filesystem that holds file into
// file (internal/diskfill), and checks that a new page cannot be had: a
// write of one page beside file fails with ENOSPC. Removing file frees the
// disk again.
func FillDisk(t testing.TB, file string) {
	t.Helper()
	if err := diskfill.Fill(file, 0); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(filepath.Dir(file), "probe")
	if err := os.WriteFile(probe, make([]byte, 4096), 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a write on the filled filesystem: %v, want ENOSPC", err)
	}
	os.Remove(probe)
}
