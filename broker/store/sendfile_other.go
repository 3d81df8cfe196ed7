//go:build !linux

package store

import "io"

// sendSections: sendfile is used on Linux only; elsewhere runs are copied.
func sendSections(io.Writer, []byte, []section, func()) (int64, bool, error) { return 0, false, nil }

// sendBatch: elsewhere the caller sends the pieces one by one.
func sendBatch(io.Writer, []Piece, func()) (int64, bool, error) { return 0, false, nil }

// spliceLikely: nothing is spliced elsewhere.
func spliceLikely(int) bool { return false }
