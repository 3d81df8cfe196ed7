//go:build !linux

package wan

import "errors"

// Site is one emulated site.
type Site struct {
	Name, NS, Addr string
}

// Net is a set of emulated sites.
type Net struct{ Sites []Site }

var errLinux = errors.New("wan: network namespaces need Linux")

// Setup needs Linux.
func Setup(names []string, o Options) (*Net, error) { return nil, errLinux }

// Block needs Linux.
func (n *Net) Block(site string, port int, on bool) error { return errLinux }

// Close does nothing.
func (n *Net) Close() error { return nil }

// RemoveStale needs Linux.
func RemoveStale(prefix string) error { return errLinux }
