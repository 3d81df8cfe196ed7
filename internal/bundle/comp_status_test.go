package bundle

import "testing"

// TestStatusBeforeStart: the admin endpoint serves /status while the
// bundle still starts its components, so a component asked for its status
// before its Start answers (a soak's site panicked in the repair
// component's Status there).
func TestStatusBeforeStart(t *testing.T) {
	t.Parallel()
	comps := []Component{newTxnComponent(), newShipperComponent(), newReceiverComponent(),
		newConfigSyncComponent(), newDashboardComponent(), newTopologyComponent(), newRepairComponent()}
	for _, c := range comps {
		if r, ok := c.(StatusReporter); ok {
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s: Status before Start panicked: %v", c.Name(), p)
					}
				}()
				if st := r.Status(); st == nil {
					t.Errorf("%s: Status before Start is nil", c.Name())
				}
			}()
		}
	}
}
