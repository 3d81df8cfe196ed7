// Package unixsock listens on and dials unix stream sockets by path, for
// paths of any length, and refuses to take over a socket a live process
// still serves.
//
// A socket address holds at most 107 bytes of path. A longer path (a data
// directory deep in a file system) is reached through the directory: it is
// opened and the socket is named /proc/self/fd/<n>/<name>, which the kernel
// resolves like the full path (Linux).
package unixsock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxPath is the longest path a sockaddr_un holds, its final NUL excluded.
const maxPath = 107

// ErrInUse is returned by Listen when another process answers on the path.
var ErrInUse = errors.New("unixsock: socket in use by a running process")

// Listener is a unix listener that removes its socket file when closed.
type Listener struct {
	net.Listener
	path string
	once sync.Once
}

// Close stops listening and removes the socket file.
func (l *Listener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
			err = fmt.Errorf("unixsock: remove %s: %w", l.path, rerr)
		}
	})
	return err
}

// Path is the socket's file.
func (l *Listener) Path() string { return l.path }

// Listen listens on path with file mode perm. A socket file left at path by
// a process that has gone is replaced; one that a process still answers on
// is not (ErrInUse).
func Listen(path string, perm os.FileMode) (*Listener, error) {
	if _, err := os.Lstat(path); err == nil {
		c, derr := Dial(context.Background(), path, time.Second)
		if derr == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("unixsock: remove stale socket %s: %w", path, err)
		}
	}
	var ln net.Listener
	err := withShortPath(path, func(short string) error {
		var err error
		ln, err = net.Listen("unix", short)
		if err == nil {
			// The name it was bound by may be /proc/self/fd/<n>/..., whose
			// descriptor is closed at return: the file is removed by its
			// full path instead (Listener.Close).
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unixsock: listen %s: %w", path, err)
	}
	l := &Listener{Listener: ln, path: path}
	if err := os.Chmod(path, perm); err != nil {
		l.Close()
		return nil, fmt.Errorf("unixsock: chmod %s: %w", path, err)
	}
	return l, nil
}

// Dial connects to the socket at path, within timeout (0: none).
func Dial(ctx context.Context, path string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := withShortPath(path, func(short string) error {
		d := net.Dialer{Timeout: timeout}
		var err error
		c, err = d.DialContext(ctx, "unix", short)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unixsock: dial %s: %w", path, err)
	}
	return c, nil
}

// withShortPath calls f with path, or, when path is too long for a socket
// address, with a name for it through an open descriptor of its directory.
func withShortPath(path string, f func(string) error) error {
	if len(path) <= maxPath {
		return f(path)
	}
	dir, name := filepath.Split(path)
	fd, err := syscall.Open(dir, unix.O_PATH|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory of a long socket path: %w", &os.PathError{Op: "open", Path: dir, Err: err})
	}
	defer syscall.Close(fd)
	short := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
	if len(short) > maxPath {
		return fmt.Errorf("socket name %q too long", name)
	}
	return f(short)
}
