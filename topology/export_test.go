package topology

// Crash stops the node without leaving the pool, as a killed process would,
// so that tests in package topology_test can exercise failure detection.
func (t *Topology) Crash() error { return t.close(false) }
