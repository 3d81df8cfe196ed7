package faultsched

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSiteGenerationIsMastersOnly: a put is counted in a generation only
// when the site that answered it was master by its identity file, or, with
// no role recorded, by its start command; a slave site's gateway answers
// puts the master stored, and counting them as the slave's own made the
// checker report two masters of one generation (soak seeds 920000 and
// 920002: hf and gz, slaves by their start command with no role recorded,
// were counted as masters of generations 0 and 2).
func TestSiteGenerationIsMastersOnly(t *testing.T) {
	l := &Layout{Dir: t.TempDir()}
	write := func(site, body string) {
		t.Helper()
		dir := filepath.Join(l.DataDir(site), "replication")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "identity.json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if g := siteGeneration(l, "bj"); g != 0 {
		t.Errorf("bj, the configured master, with no identity file: %d, want 0", g)
	}
	if g := siteGeneration(l, "hf"); g != -3 {
		t.Errorf("hf, a slave by its start command, with no identity file: %d, want -3", g)
	}
	for _, c := range []struct {
		site, body string
		want       int64
	}{
		{"gz", `{"generation": 2}`, -3},
		{"bj", `{"generation": 2}`, 2},
		{"gz", `{"generation": 5, "role": {"name": "master", "generation": 5}}`, 5},
		{"gz", `{"generation": 7, "role": {"name": "master", "generation": 5}}`, -3},
		{"bj", `{"generation": 3, "role": {"name": "slave", "generation": 3}}`, -3},
		{"hf", `{"generation": `, -2},
	} {
		write(c.site, c.body)
		if g := siteGeneration(l, c.site); g != c.want {
			t.Errorf("%s with %s: %d, want %d", c.site, c.body, g, c.want)
		}
	}
}
