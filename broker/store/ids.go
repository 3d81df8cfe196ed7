package store

// NextID hands out a message id from the same generator the writer uses, for
// messages that need their id before they are appended (transactional puts,
// see Transactions in broker/wire/doc.go). Ids stay unique across both paths.
func (s *Store) NextID() int64 { return s.w.ids.next(s.clk.Now().UnixMilli()) }
