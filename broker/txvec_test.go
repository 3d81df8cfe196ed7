package broker

import "testing"

// newVectorTxHandler returns the transaction handler the transaction vectors
// run against, or nil when none is available.
func newVectorTxHandler(t *testing.T) TxHandler { return nil }
