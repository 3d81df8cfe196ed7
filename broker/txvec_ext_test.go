package broker_test

import (
	"path/filepath"
	"testing"

	"metaq/broker"
	"metaq/broker/store"
	"metaq/broker/txn"
)

func init() {
	broker.VectorTxHandler = func(t testing.TB, st *store.Store, b *broker.Broker) broker.TxHandler {
		m, err := txn.Open(txn.Options{Dir: filepath.Join(t.TempDir(), "transactions"), Store: st, NextID: st.NextID, FlushAtCommit: 1})
		if err != nil {
			t.Fatalf("open transactions: %v", err)
		}
		t.Cleanup(func() { m.Close() })
		return txn.NewHandler(m, b)
	}
}
