package bundle

import (
	"strings"
	"testing"

	"metaq/georeplicator"
)

// TestSwitchoverTargetNamesKnownSlaves: a switchover to a slave that is
// down, or to a name no slave has, is refused before anything changes, and
// the error names every slave the master knows with its state.
func TestSwitchoverTargetNamesKnownSlaves(t *testing.T) {
	t.Parallel()
	slaves := []georeplicator.GroupLag{
		{Group: "meta-slave-group-hf", SlaveID: 1, Connected: true},
		{Group: "meta-slave-group-gz", SlaveID: 2, Connected: false},
	}
	known := "meta-slave-group-gz (slaveId 2): DOWN (not connected); meta-slave-group-hf (slaveId 1): connected"
	for _, tc := range []struct {
		to, err string
	}{
		{"hf", ""},
		{"1", ""},
		{"meta-slave-group-hf", ""},
		{"gz", `the slave "gz" is not connected to this master`},
		{"gzz", `no slave of this master is named "gzz"`},
	} {
		t.Run(tc.to, func(t *testing.T) {
			err := checkSwitchoverTarget(tc.to, slaves, slaveMatcher(tc.to))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), known) {
				t.Errorf("got %v, want %q and %q", err, tc.err, known)
			}
		})
	}
	if err := checkSwitchoverTarget("hf", nil, func(string, int) bool { return false }); err == nil || !strings.Contains(err.Error(), "slaves it knows: none") {
		t.Errorf("no slaves: %v", err)
	}
}
