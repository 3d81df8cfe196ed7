package broker

import (
	"testing"

	"metaq/broker/store"
)

// VectorTxHandler builds the transaction handler the transaction vectors run
// against. broker/txn imports broker, so the handler is built in the external
// test package (txvec_ext_test.go), which sets this before any test runs.
var VectorTxHandler func(t testing.TB, st *store.Store, b *Broker) TxHandler
