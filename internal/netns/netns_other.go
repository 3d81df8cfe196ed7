//go:build !linux

// Package netns runs code inside a named network namespace; Linux only.
package netns

import "errors"

// Do fails: network namespaces exist on Linux only.
func Do(string, func() error) error { return errors.New("netns: network namespaces need Linux") }
