package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add(AppendRecord(nil, 0x0102030405060708, 0, []byte("hello")))
	f.Add(AppendRecord(AppendRecord(nil, -5, 1, []byte("\x00\x00\x00\x04attrhello")), 7, 0, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if n < RecordHeaderLen || n > len(b) {
			t.Fatalf("length %d of %d", n, len(b))
		}
		if again := AppendRecord(nil, r.ID, r.Flag, r.Body); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs: %x vs %x", again, b[:n])
		}
		if cnt, err := VerifyRecords(b[:n]); err != nil || cnt != 1 {
			t.Fatalf("VerifyRecords = %d, %v", cnt, err)
		}
	})
}

// fuzzBase builds one small store (two segments, three partitions, clean
// close) whose files each fuzz run copies and damages.
var fuzzBase struct {
	once  sync.Once
	files map[string][]byte
	parts map[int][]byte
	err   error
}

func fuzzTemplate(t testing.TB) (map[string][]byte, map[int][]byte) {
	fuzzBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "store-fuzz-")
		if err != nil {
			fuzzBase.err = err
			return
		}
		defer os.RemoveAll(dir)
		s, err := Open(Options{Dir: dir, SegmentBytes: 4096})
		if err != nil {
			fuzzBase.err = err
			return
		}
		fuzzBase.parts = map[int][]byte{}
		for i := 0; i < 40; i++ {
			p := i % 3
			body := bytes.Repeat([]byte{byte('a' + i%26)}, 40+i*3)
			a, err := s.Append(context.Background(), "f", p, []Message{{Body: body}})
			if err != nil {
				fuzzBase.err = err
				return
			}
			fuzzBase.parts[p] = AppendRecord(fuzzBase.parts[p], a[0].ID, 0, body)
		}
		s.Close()
		fuzzBase.files = map[string][]byte{}
		filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				b, _ := os.ReadFile(path)
				rel, _ := filepath.Rel(dir, path)
				fuzzBase.files[rel] = b
			}
			return nil
		})
	})
	if fuzzBase.err != nil {
		t.Fatal(fuzzBase.err)
	}
	return fuzzBase.files, fuzzBase.parts
}

// FuzzRecovery damages a store's files (mode: 0 append to the log tail,
// 1 overwrite log bytes, 2 replace the checkpoint, 3 replace an index file,
// 4 overwrite log bytes and drop the checkpoint, 5 overwrite bytes of a
// sealed segment's index file: its entries or its footer) and checks that Open
// recovers: every partition serves a valid prefix of what was written and
// takes new appends that survive a reopen.
func FuzzRecovery(f *testing.F) {
	f.Add(byte(0), uint16(0), []byte("MQLG\x00\x00\x00\x10"))
	f.Add(byte(1), uint16(100), []byte{0xde, 0xad})
	f.Add(byte(2), uint16(0), []byte("MQCK\x00\x00\x00\x01garbage"))
	f.Add(byte(3), uint16(1), []byte("MQIX"))
	f.Add(byte(4), uint16(3000), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(byte(4), uint16(5), []byte{0xff})
	f.Add(byte(5), uint16(900), []byte{0x01})
	f.Add(byte(5), uint16(65000), []byte("MQIF"))
	f.Fuzz(func(t *testing.T, mode byte, where uint16, data []byte) {
		files, parts := fuzzTemplate(t)
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "log"), 0o755)
		var segs, idxs []string
		for name, b := range files {
			os.WriteFile(filepath.Join(dir, name), b, 0o644)
			switch filepath.Ext(name) {
			case segSuffix:
				segs = append(segs, name)
			case idxSuffix:
				idxs = append(idxs, name)
			}
		}
		sortStrings(segs)
		sortStrings(idxs)
		pick := func(list []string) string { return filepath.Join(dir, list[int(where)%len(list)]) }
		switch mode % 6 {
		case 0:
			last := filepath.Join(dir, segs[len(segs)-1])
			fh, _ := os.OpenFile(last, os.O_WRONLY|os.O_APPEND, 0)
			fh.Write(data)
			fh.Close()
		case 1, 4:
			p := pick(segs)
			b, _ := os.ReadFile(p)
			if len(b) > 0 {
				at := int(where) % len(b)
				copy(b[at:], data)
				os.WriteFile(p, b, 0o644)
			}
			if mode%5 == 4 {
				os.Remove(filepath.Join(dir, ckptName))
			}
		case 2:
			os.WriteFile(filepath.Join(dir, ckptName), data, 0o644)
		case 3:
			if len(idxs) > 0 {
				os.WriteFile(pick(idxs), data, 0o644)
			}
		case 5:
			// Sealed segments only: a damaged block of the active
			// segment's .idx fails its reads until the next start-up,
			// which re-indexes (doc.go, Recovery).
			if len(idxs) > 1 {
				p := pick(idxs[:len(idxs)-1])
				b, _ := os.ReadFile(p)
				if len(b) > 0 {
					copy(b[int(where)%len(b):], data)
					os.WriteFile(p, b, 0o644)
				}
			}
		}
		s, err := Open(Options{Dir: dir, SegmentBytes: 4096})
		if err != nil {
			t.Fatalf("Open after damage: %v", err)
		}
		defer s.Close()
		for p, w := range parts {
			if _, err := s.Partition("f", p); err != nil {
				continue // the damage hit its definition: nothing served
			}
			info, _ := s.Partition("f", p)
			// Every byte served sits at the offset it was written at;
			// damaged ranges are skipped, never served.
			var got []byte
			for off := info.Min; ; {
				if cur, _ := s.Partition("f", p); off >= cur.Max {
					break
				}
				b, err := s.Read("f", p, off, 1000)
				var de *DamagedError
				if errors.As(err, &de) {
					if de.Next <= off {
						t.Fatalf("read %d at %d: damaged range does not move forward: %v", p, off, err)
					}
					off = de.Next
					continue
				}
				if err != nil || len(b) == 0 {
					t.Fatalf("read %d at %d: %d bytes, %v", p, off, len(b), err)
				}
				if off+int64(len(b)) > int64(len(w)) || !bytes.Equal(b, w[off:off+int64(len(b))]) {
					t.Fatalf("partition %d serves bytes at %d that were never written there (min %d, %d bytes)", p, off, info.Min, len(b))
				}
				if off == info.Min+int64(len(got)) {
					got = append(got, b...) // the run before the first hole
				}
				off += int64(len(b))
			}
			if info.Min < 0 || info.Min > int64(len(w)) {
				t.Fatalf("partition %d: min %d", p, info.Min)
			}
			if _, err := VerifyRecords(got); err != nil && info.Min == 0 {
				t.Fatalf("partition %d: %v", p, err)
			}
		}
		// ReadLog walks the whole log without error and ships each
		// partition's chunks in offset order, never bytes that were not
		// written.
		first, _ := s.LogBounds()
		shipped := map[int]int64{}
		for pos := first; ; {
			ents, next, err := s.ReadLog(pos, 700)
			if err != nil {
				t.Fatalf("ReadLog at %d: %v", pos, err)
			}
			for _, e := range ents {
				w := parts[e.Partition]
				if len(e.Records) == 0 {
					// a hole marker: the partition continues at e.Offset
					if last, ok := shipped[e.Partition]; ok && e.Offset < last {
						t.Fatalf("partition %d: hole marker back to %d after %d", e.Partition, e.Offset, last)
					}
					shipped[e.Partition] = e.Offset
					continue
				}
				if last, ok := shipped[e.Partition]; ok && e.Offset != last {
					t.Fatalf("partition %d shipped at %d after %d", e.Partition, e.Offset, last)
				}
				if e.Offset+int64(len(e.Records)) > int64(len(w)) || !bytes.Equal(e.Records, w[e.Offset:e.Offset+int64(len(e.Records))]) {
					t.Fatalf("ReadLog shipped bytes never written to partition %d at %d", e.Partition, e.Offset)
				}
				shipped[e.Partition] = e.Offset + int64(len(e.Records))
			}
			if next == pos {
				break
			}
			pos = next
		}
		a, err := s.Append(context.Background(), "f", 1, []Message{{Body: []byte("after")}})
		if err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
		s.Close()
		s2, err := Open(Options{Dir: dir, SegmentBytes: 4096})
		if err != nil {
			t.Fatalf("second open: %v", err)
		}
		defer s2.Close()
		b, err := s2.Read("f", 1, a[0].Offset, 100)
		if err != nil || !bytes.Equal(b, AppendRecord(nil, a[0].ID, 0, []byte("after"))) {
			t.Fatalf("appended record after reopen: %x %v", b, err)
		}
	})
}

func sortStrings(a []string) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}
