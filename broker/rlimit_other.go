//go:build !unix

package broker

// fileLimit returns 0: the open-file limit is not known here.
func fileLimit() int { return 0 }
