package georeplicator

import (
	"os"
	"path/filepath"
	"testing"
)

// TestIdentityRoleSurvivesReopen: the role a site took at run time (a
// promotion, a demotion) is in the identity file, so that a restart reads
// it back; clearing it leaves the start command in charge again, and a file
// written before roles were recorded loads with none.
func TestIdentityRoleSurvivesReopen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "identity.json")
	id, err := OpenIdentity(file)
	if err != nil {
		t.Fatal(err)
	}
	if r := id.Role(); r != nil {
		t.Fatalf("a new identity has role %+v", r)
	}
	if err := id.Promote(3, map[string]int64{"orders-0": 10}); err != nil {
		t.Fatal(err)
	}
	reopen := func() *IdentityStore {
		t.Helper()
		id, err := OpenIdentity(file)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	if r := reopen().Role(); r == nil || r.Name != RoleMaster || r.Generation != 3 || r.Since.IsZero() {
		t.Fatalf("after a promotion: role %+v, want master of generation 3", r)
	}
	want := Role{Name: RoleSlave, Generation: 4, SlaveID: 2, SlaveGroup: "meta-slave-group-bj", MasterAddress: "127.0.0.1:8124"}
	if err := id.SetRole(&want); err != nil {
		t.Fatal(err)
	}
	got := reopen().Role()
	if got == nil {
		t.Fatal("the slave role was not kept")
	}
	want.Since = got.Since
	if *got != want {
		t.Fatalf("after a demotion: role %+v, want %+v", *got, want)
	}
	if err := id.SetRole(nil); err != nil {
		t.Fatal(err)
	}
	if r := reopen().Role(); r != nil {
		t.Fatalf("after clearing: role %+v", r)
	}

	old := filepath.Join(t.TempDir(), "identity.json")
	if err := os.WriteFile(old, []byte(`{"logId":"abc","generation":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	oid, err := OpenIdentity(old)
	if err != nil || oid.Role() != nil || oid.Generation() != 1 {
		t.Fatalf("an identity without a role: %+v %v", oid, err)
	}
}
