package faultsched

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"metaq/internal/diskfill"
)

// diskSize caps each site's data filesystem when the harness can mount
// one (as root): a tmpfs of its own, so that filling it fills only that
// site's disk.
const diskSize = 256 << 20

// mountDisks gives every site's data directory a tmpfs of diskSize; false
// (and nothing mounted) when that is not possible here (not root).
func (c *Cluster) mountDisks() bool {
	if os.Geteuid() != 0 {
		return false
	}
	var done []string
	for _, s := range Sites {
		d := c.L.DataDir(s)
		if err := os.MkdirAll(d, 0o755); err != nil {
			break
		}
		if err := diskfill.Mount(d, diskSize); err != nil {
			break
		}
		done = append(done, d)
	}
	if len(done) < len(Sites) {
		for _, d := range done {
			_ = diskfill.Unmount(d)
		}
		return false
	}
	c.mu.Lock()
	c.mounted = done
	c.mu.Unlock()
	return true
}

// unmountDisks removes the tmpfs mounts (lazily: a process may still be
// exiting), copying each to <dataPath>.saved first when KeepData is set.
func (c *Cluster) unmountDisks() error {
	c.mu.Lock()
	ms := c.mounted
	c.mounted = nil
	keep := c.KeepData
	c.mu.Unlock()
	var errs []string
	for _, d := range ms {
		if keep {
			// The tmpfs goes with the mount: keep a copy for reading.
			if out, err := exec.Command("cp", "-a", d, d+".saved").CombinedOutput(); err != nil {
				errs = append(errs, fmt.Sprintf("save %s: %v %s", d, err, out))
			}
		}
		if err := diskfill.Unmount(d); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("faultsched: %s", strings.Join(errs, "; "))
	}
	return nil
}

func (c *Cluster) fillerPath(site string) string {
	return filepath.Join(c.L.DataDir(site), "disk-full.filler")
}

// FillDisk fills the site's data filesystem with one file, leaving 64 KiB
// (on), or removes the file.
func (c *Cluster) FillDisk(site string, on bool) error {
	c.mu.Lock()
	mounted := len(c.mounted) > 0
	c.mu.Unlock()
	if !mounted {
		return fmt.Errorf("faultsched: disk-full at %s: no data filesystem of its own (not root): skipped", site)
	}
	p := c.fillerPath(site)
	if !on {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("faultsched: free the disk of %s: %w", site, err)
		}
		return nil
	}
	if err := diskfill.Fill(p, 64<<10); err != nil {
		return fmt.Errorf("faultsched: disk-full at %s: %w", site, err)
	}
	return nil
}

// DiskFilled reports whether the site's filler file exists.
func (c *Cluster) DiskFilled(site string) bool {
	_, err := os.Stat(c.fillerPath(site))
	return err == nil
}

// FlipSealed flips one byte of a sealed segment (not the newest) of the
// site's log; pick chooses the segment and the byte. It says which byte.
func (c *Cluster) FlipSealed(site string, pick int) (string, error) {
	segs, err := filepath.Glob(filepath.Join(c.L.DataDir(site), "log", "*.log"))
	if err != nil {
		return "", fmt.Errorf("faultsched: flip at %s: %w", site, err)
	}
	sort.Strings(segs)
	if len(segs) < 2 {
		return "no sealed segment yet: nothing flipped", nil
	}
	seg := segs[pick%(len(segs)-1)]
	f, err := os.OpenFile(seg, os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("faultsched: flip at %s: %w", site, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return "", fmt.Errorf("faultsched: flip at %s: %s: empty or unreadable (%v)", site, seg, err)
	}
	off := int64(pick/7) % fi.Size()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return "", fmt.Errorf("faultsched: flip at %s: %w", site, err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		return "", fmt.Errorf("faultsched: flip at %s: %w", site, err)
	}
	return fmt.Sprintf("flipped byte %d of %s (%d bytes)", off, filepath.Base(seg), fi.Size()), nil
}
