package wire

import (
	"errors"
	"fmt"
)

// FatalError is malformed input: the connection must be closed without an
// answer, which is what MetaQ (gecko) does when its decoder throws.
type FatalError struct {
	Msg string
	// TooLarge is set when a declared body exceeds the decoder's limit.
	TooLarge bool
	Err      error
}

func (e *FatalError) Error() string {
	if e.Err != nil {
		return "wire: " + e.Msg + ": " + e.Err.Error()
	}
	return "wire: " + e.Msg
}

func (e *FatalError) Unwrap() error { return e.Err }

func fatalf(cause error, format string, args ...any) *FatalError {
	return &FatalError{Msg: fmt.Sprintf(format, args...), Err: cause}
}

// ClientError is a recoverable request error: the broker answers it with
// Code and Msg as a `result` frame and keeps the connection.
type ClientError struct {
	Code int
	Msg  string
	Err  error
}

func (e *ClientError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("wire: %d %s: %v", e.Code, e.Msg, e.Err)
	}
	return fmt.Sprintf("wire: %d %s", e.Code, e.Msg)
}

func (e *ClientError) Unwrap() error { return e.Err }

// IsFatal reports whether err requires closing the connection: a
// *FatalError or any non-protocol error (I/O).
func IsFatal(err error) bool {
	if err == nil {
		return false
	}
	var ce *ClientError
	return !errors.As(err, &ce)
}
