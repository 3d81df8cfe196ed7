package txn

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"metaq/internal/atomicfile"
)

// Entry kinds in the journal.
const (
	kindPut       byte = 1
	kindPrepare   byte = 2
	kindIntent    byte = 3
	kindDone      byte = 4
	kindRollback  byte = 5
	kindHeuristic byte = 6
	kindForget    byte = 7
	// kindSnapshot opens every file writeSnapshot writes: the file holds
	// every live transaction, so replay forgets what older files said
	// (they are left only by a crash before their removal).
	kindSnapshot byte = 8
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxEntry bounds one journal entry; a larger length is corruption.
const maxEntry = 64 << 20

// record is the JSON payload of every entry kind; unused fields are omitted.
type record struct {
	Key       string       `json:"k"`
	Topic     string       `json:"t,omitempty"`
	Partition int          `json:"p,omitempty"`
	ID        int64        `json:"id,omitempty"`
	Flag      int32        `json:"f,omitempty"`
	Body      []byte       `json:"b,omitempty"`
	Parts     []intentPart `json:"parts,omitempty"`
	State     int          `json:"st,omitempty"` // heuristic state
}

// intentPart says where a committing batch will land in one partition.
type intentPart struct {
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	From      int64  `json:"from"`  // partition end before the append: a lower bound
	FirstID   int64  `json:"first"` // id of the batch's first message
	Count     int    `json:"n"`
}

type journalEntry struct {
	kind byte
	rec  record
}

// journal is the append-only redo file. It is not safe for concurrent use:
// the Manager serialises access under its mutex.
type journal struct {
	dir  string
	n    int // number of the current file
	f    *os.File
	w    *bufio.Writer
	size int64
}

func journalName(dir string, n int) string {
	return filepath.Join(dir, "redo."+strconv.Itoa(n))
}

// listJournals returns the numbers of the redo files in dir, ascending.
func listJournals(dir string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ns []int
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, "redo.") {
			continue
		}
		n, err := strconv.Atoi(strings.TrimPrefix(name, "redo."))
		if err != nil {
			continue // strangers
		}
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns, nil
}

// readJournal reads every valid entry of one file and returns them with the
// length of the valid prefix. A short or corrupt entry ends the file.
func readJournal(path string) ([]journalEntry, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var out []journalEntry
	var valid int64
	hdr := make([]byte, 8)
	for {
		if _, err := io.ReadFull(r, hdr); err != nil {
			return out, valid, nil
		}
		n := binary.BigEndian.Uint32(hdr)
		sum := binary.BigEndian.Uint32(hdr[4:])
		if n < 1 || n > maxEntry {
			return out, valid, nil
		}
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return out, valid, nil
		}
		if crc32.Checksum(buf, castagnoli) != sum {
			return out, valid, nil
		}
		var e journalEntry
		e.kind = buf[0]
		if err := json.Unmarshal(buf[1:], &e.rec); err != nil {
			return out, valid, nil
		}
		out = append(out, e)
		valid += 8 + int64(n)
	}
}

// openJournalFile opens file n for appending, truncated to size.
func openJournalFile(dir string, n int, size int64) (*journal, error) {
	path := journalName(dir, n)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("txn: open journal %s: %w", path, err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("txn: truncate journal %s to %d: %w", path, size, err)
	}
	if _, err := f.Seek(size, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("txn: seek journal %s: %w", path, err)
	}
	return &journal{dir: dir, n: n, f: f, w: bufio.NewWriterSize(f, 64<<10), size: size}, nil
}

func encodeEntry(kind byte, rec *record) ([]byte, error) {
	payload, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 9+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(1+len(payload)))
	buf[8] = kind
	copy(buf[9:], payload)
	binary.BigEndian.PutUint32(buf[4:], crc32.Checksum(buf[8:], castagnoli))
	return buf, nil
}

func (j *journal) append(kind byte, rec *record) error {
	buf, err := encodeEntry(kind, rec)
	if err != nil {
		return fmt.Errorf("txn: encode journal entry: %w", err)
	}
	if _, err := j.w.Write(buf); err != nil {
		return fmt.Errorf("txn: write journal %s: %w", j.f.Name(), err)
	}
	j.size += int64(len(buf))
	return nil
}

// flush hands buffered entries to the OS; sync also fsyncs them.
func (j *journal) flush(sync bool) error {
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("txn: write journal %s: %w", j.f.Name(), err)
	}
	if sync {
		if err := j.f.Sync(); err != nil {
			return fmt.Errorf("txn: fsync journal %s: %w", j.f.Name(), err)
		}
	}
	return nil
}

func (j *journal) close() error {
	if j == nil || j.f == nil {
		return nil
	}
	err := j.w.Flush()
	if serr := j.f.Sync(); err == nil {
		err = serr
	}
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	return err
}

// writeSnapshot replaces redo.<n> with entries (see internal/atomicfile).
func writeSnapshot(dir string, n int, entries []journalEntry) error {
	path := journalName(dir, n)
	var buf bytes.Buffer
	if len(entries) > 0 {
		// An empty snapshot stays an empty file, which a full disk still
		// takes; replaying the files beside it again adds nothing live.
		marker, err := encodeEntry(kindSnapshot, &record{})
		if err != nil {
			return fmt.Errorf("txn: encode %s: %w", path, err)
		}
		buf.Write(marker)
	}
	for i := range entries {
		b, err := encodeEntry(entries[i].kind, &entries[i].rec)
		if err != nil {
			return fmt.Errorf("txn: encode %s: %w", path, err)
		}
		buf.Write(b)
	}
	if err := atomicfile.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("txn: write snapshot: %w", err)
	}
	return nil
}
