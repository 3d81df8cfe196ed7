package topology

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestNameIsIdentityRoleIsCurrent: the gossip node name is the bundle's
// identity in the pool and keeps its start-up default (hf-1-s1) after a
// promotion, while the role gossiped beside it follows the promotion.
func TestNameIsIdentityRoleIsCurrent(t *testing.T) {
	var promoted atomic.Bool
	tp, err := New(Options{Site: "hf", Role: RoleSlave, BrokerID: 1, SlaveID: 1, ServeURL: "meta://127.0.0.1:18124",
		Key: []byte("0123456789abcdef"), Timing: FastTiming(), RefreshInterval: 50 * time.Millisecond,
		Mastership: MastershipFunc(func() Mastership {
			if promoted.Load() {
				return Mastership{Role: RoleMaster, SlaveID: -1, Generation: 3, ReplAddr: "127.0.0.1:18125"}
			}
			return Mastership{Role: RoleSlave, SlaveID: 1, Generation: 2}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.Close() })
	promoted.Store(true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var self *Member
		for _, m := range tp.Members() {
			if m.Local {
				self = &m
			}
		}
		if self != nil && self.Meta.Role == RoleMaster && self.Meta.Generation == 3 {
			if self.Name != "hf-1-s1" {
				t.Fatalf("name %q changed with the role", self.Name)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gossiped role did not follow the promotion: %+v", self)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
