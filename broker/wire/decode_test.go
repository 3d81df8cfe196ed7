package wire

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"stats  0", []string{"stats", "", "0"}},
		{"stats  ", []string{"stats"}},
		{"stats", []string{"stats"}},
		{"", []string{""}},
		{"   ", nil},
		{" version", []string{"", "version"}},
		{"version\t5", []string{"version\t5"}},
		{"a  b  ", []string{"a", "", "b"}},
	}
	for _, c := range cases {
		if got := Split(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDecode(t *testing.T) {
	tx1 := TxID{Kind: TxLocal, SessionID: "s-1", Value: 1}
	xa := TxID{Kind: TxXA, FormatID: 1, GlobalID: []byte("global1"), BranchQualifier: []byte("branch1"), UniqueQualifier: "uq"}
	cases := []struct {
		name string
		in   string
		want Command
	}{
		{"put6", "put t 0 5 0 -1\r\nhello", &Put{Topic: "t", Partition: 0, Checksum: NoChecksum, Opaque: -1, Body: []byte("hello"), Fields: 6}},
		{"put7-checksum", "put t -1 5 1 907060870 7\r\nhello", &Put{Topic: "t", Partition: -1, Flag: 1, Checksum: 907060870, Opaque: 7, Body: []byte("hello"), Fields: 7}},
		{"put7-minus1", "put t 0 5 0 -1 7\r\nhello", &Put{Topic: "t", Checksum: -1, Opaque: 7, Body: []byte("hello"), Fields: 7}},
		{"put7-txkey", "put t 0 5 0 TX:s-1:1 7\r\nhello", &Put{Topic: "t", Checksum: NoChecksum, TxKey: "TX:s-1:1", Tx: tx1, Opaque: 7, Body: []byte("hello"), Fields: 7}},
		{"put8", "put t 0 5 0 3 TX:s-1:1 7\r\nhello", &Put{Topic: "t", Checksum: 3, TxKey: "TX:s-1:1", Tx: tx1, Opaque: 7, Body: []byte("hello"), Fields: 8}},
		{"put-empty-body", "put t 0 0 0 -1\r\n", &Put{Topic: "t", Checksum: NoChecksum, Opaque: -1, Fields: 6}},
		{"get", "get t g 1 9223372036854775807 1048576 -5\r\n", &Get{Topic: "t", Group: "g", Partition: 1, Offset: 9223372036854775807, MaxSize: 1048576, Opaque: -5}},
		{"offset", "offset t g 1 10 3\r\n", &Offset{Topic: "t", Group: "g", Partition: 1, Offset: 10, Opaque: 3}},
		{"version", "version -3\r\n", &Version{Opaque: -3, HasOpaque: true}},
		{"version-none", "version\r\n", &Version{Opaque: NoOpaque}},
		{"version-tab", "version\t5\r\n", &Version{Opaque: NoOpaque}},
		{"version-any-v-word", "vxyz 4\r\n", &Version{Opaque: 4, HasOpaque: true}},
		{"stats-blank", "stats  0\r\n", &Stats{Item: "", HasItem: true, Opaque: 0, HasOpaque: true}},
		{"stats-trailing", "stats  \r\n", &Stats{Opaque: NoOpaque}},
		{"stats-none", "stats\r\n", &Stats{Opaque: NoOpaque}},
		{"stats-item", "stats topics -1\r\n", &Stats{Item: "topics", HasItem: true, Opaque: -1, HasOpaque: true}},
		{"stats-item-no-opaque", "stats config\r\n", &Stats{Item: "config", HasItem: true, Opaque: NoOpaque}},
		{"quit", "quit\r\n", &Quit{}},
		{"quit-any-q-word", "qqq 1 2\r\n", &Quit{}},
		{"tx5", "transaction TX:s-1:1 s-1 BEGIN 9\r\n", &Transaction{TxKey: "TX:s-1:1", Tx: tx1, SessionID: "s-1", Type: TxBegin, Opaque: 9}},
		{"tx6-timeout", "transaction TX:s-1:1 s-1 BEGIN 3 9\r\n", &Transaction{TxKey: "TX:s-1:1", Tx: tx1, SessionID: "s-1", Type: TxBegin, Timeout: 3, Opaque: 9}},
		{"tx6-uq", "transaction XID:1:676c6f62616c31:6272616e636831:uq s END uq 9\r\n", &Transaction{TxKey: "XID:1:676c6f62616c31:6272616e636831:uq", Tx: xa, SessionID: "s", Type: TxEnd, UniqueQualifier: "uq", Opaque: 9}},
		{"tx7", "transaction XID:1:676c6f62616c31:6272616e636831:uq s PREPARE 30 uq 9\r\n", &Transaction{TxKey: "XID:1:676c6f62616c31:6272616e636831:uq", Tx: xa, SessionID: "s", Type: TxPrepare, Timeout: 30, UniqueQualifier: "uq", Opaque: 9}},
		{"tx-null", "transaction null s RECOVER uq 9\r\n", &Transaction{TxKey: "null", Tx: TxID{Kind: TxNull}, SessionID: "s", Type: TxRecover, UniqueQualifier: "uq", Opaque: 9}},
		{"sync7", "sync t 0 5 0 6393882542081 -2\r\nhello", &Sync{Topic: "t", MsgID: 6393882542081, Checksum: NoChecksum, Opaque: -2, Body: []byte("hello"), Fields: 7}},
		{"sync8", "sync t 0 5 0 6393882542081 907060870 -2\r\nhello", &Sync{Topic: "t", MsgID: 6393882542081, Checksum: 907060870, Opaque: -2, Body: []byte("hello"), Fields: 8}},
		{"result", "result 404 9 99\r\nnot found", &Result{Code: 404, Body: []byte("not found"), Opaque: 99}},
		{"result-empty", "result 200 0 1\r\n", &Result{Code: 200, Opaque: 1}},
		{"value", "value 5 99\r\nhello", &Value{Data: []byte("hello"), Opaque: 99}},
		{"lf-inside-line", "stats a\nb 1\r\n", &Stats{Item: "a\nb", HasItem: true, Opaque: 1, HasOpaque: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, used, err := DecodeBytes([]byte(c.in))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if used != len(c.in) {
				t.Fatalf("consumed %d of %d bytes", used, len(c.in))
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %#v\nwant %#v", got, c.want)
			}
		})
	}
}

func TestDecodeFatal(t *testing.T) {
	cases := []struct{ name, in string }{
		{"leading-space", " version 1\r\n"},
		{"blank-line", "\r\n"},
		{"only-spaces", "   \r\n"},
		{"unknown", "hello 1\r\n"},
		{"wrong-word-put", "push t 0 5 0 1\r\nhello"},
		{"wrong-word-get", "gets t g 0 0 1 1\r\n"},
		{"wrong-word-stats-is-sync", "stat 1\r\n"},
		{"get-short", "get t g 0 0 1\r\n"},
		{"get-bad-number", "get t g x 0 1 1\r\n"},
		{"get-offset-overflow", "get t g 0 9223372036854775808 1 1\r\n"},
		{"get-tab", "get\tt g 0 0 1 1\r\n"},
		{"offset-short", "offset t g 0 1\r\n"},
		{"put-5-fields", "put t 0 5 0\r\nhello"},
		{"put-9-fields", "put t 0 5 0 1 TX:a:1 x 1\r\nhello"},
		{"put-negative-len", "put t 0 -5 0 1\r\n"},
		{"put-bad-len", "put t 0 five 0 1\r\n"},
		{"put-bad-partition", "put t p 5 0 1\r\nhello"},
		{"put-bad-opaque", "put t 0 5 0 2147483648\r\nhello"},
		{"put-bad-checksum-number", "put t 0 5 0 12a 1\r\nhello"},
		{"put-bad-txkey", "put t 0 5 0 ABC 1\r\nhello"},
		{"put8-bad-txkey", "put t 0 5 0 1 TX:a 1\r\nhello"},
		{"put8-bad-checksum", "put t 0 5 0 x TX:a:1 1\r\nhello"},
		{"tx-4-fields", "transaction TX:a:1 s BEGIN\r\n"},
		{"tx-8-fields", "transaction TX:a:1 s BEGIN 1 uq x 1\r\n"},
		{"tx-bad-type", "transaction TX:a:1 s START 1\r\n"},
		{"tx-bad-key", "transaction FOO:a:1 s BEGIN 1\r\n"},
		{"tx-local-2-parts", "transaction TX:a s BEGIN 1\r\n"},
		{"tx-local-trailing-empty", "transaction TX:a: s BEGIN 1\r\n"},
		{"tx-local-bad-n", "transaction TX:a:x s BEGIN 1\r\n"},
		{"tx-xa-4-parts", "transaction XID:1:aa:bb s BEGIN 1\r\n"},
		{"tx-xa-bad-hex", "transaction XID:1:zz:bb:uq s BEGIN 1\r\n"},
		{"tx-xa-bad-format", "transaction XID:x:aa:bb:uq s BEGIN 1\r\n"},
		{"tx6-empty-timeout", "transaction TX:a:1 s BEGIN  1\r\n"},
		{"tx7-bad-timeout", "transaction TX:a:1 s BEGIN x uq 1\r\n"},
		{"sync-6-fields", "sync t 0 5 0 1\r\nhello"},
		{"sync-bad-id", "sync t 0 5 0 x 1 2\r\nhello"},
		{"version-bad-opaque", "version x\r\n"},
		{"stats-bad-opaque", "stats x y\r\n"},
		{"result-bad-code", "result x 0 1\r\n"},
		{"value-negative", "value -1 1\r\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeBytes([]byte(c.in))
			var fe *FatalError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v (%T), want *FatalError", err, err)
			}
			if !IsFatal(err) {
				t.Fatal("IsFatal false")
			}
		})
	}
}

// TestDecodeTooLargeReadsNothing checks that an absurd declared size is
// refused before any body byte is read.
func TestDecodeTooLargeReadsNothing(t *testing.T) {
	for _, hdr := range []string{"put t 0 2147483647 0 1\r\n", "put t 0 16777217 0 1\r\n", "sync t 0 999999999 0 1 2 3\r\n", "value 2000000000 1\r\n"} {
		r := &countingReader{r: strings.NewReader(hdr + strings.Repeat("x", 1<<16))}
		d := NewDecoder(bufio.NewReaderSize(r, 4096))
		_, err := d.Decode()
		var fe *FatalError
		if !errors.As(err, &fe) || !fe.TooLarge {
			t.Fatalf("%q: err = %v, want TooLarge FatalError", hdr, err)
		}
		if r.n > 4096 {
			t.Fatalf("%q: read %d bytes, want at most one buffer", hdr, r.n)
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestDecodeIncomplete(t *testing.T) {
	for _, in := range []string{"put t 0 5 0 1\r\nhel", "version 1", "version 1\n", "version 1\r", "value 5 1\r\n"} {
		_, _, err := DecodeBytes([]byte(in))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: err = %v, want ErrUnexpectedEOF", in, err)
		}
	}
	if _, _, err := DecodeBytes(nil); !errors.Is(err, io.EOF) {
		t.Errorf("empty: err = %v, want EOF", err)
	}
}

func TestDecodeLineLimit(t *testing.T) {
	d := NewDecoder(bufio.NewReaderSize(strings.NewReader("get "+strings.Repeat("t", 100)+" g 0 0 1 1\r\n"), 16))
	d.MaxLineSize = 64
	_, err := d.Decode()
	var fe *FatalError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want FatalError", err)
	}
	// A long line within the limit that spans many buffer fills still works.
	long := "stats " + strings.Repeat("x", 500) + " 1\r\n"
	d = NewDecoder(bufio.NewReaderSize(strings.NewReader(long), 16))
	c, err := d.Decode()
	if err != nil || c.(*Stats).Item != strings.Repeat("x", 500) {
		t.Fatalf("long line: %v %v", c, err)
	}
}

func TestDecodeStream(t *testing.T) {
	in := "version 1\r\nput t 0 2 0 -1 2\r\nhiget t g 0 0 10 3\r\nquit\r\n"
	d := NewDecoder(bufio.NewReader(strings.NewReader(in)))
	var names []string
	for {
		c, err := d.Decode()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, c.Name())
	}
	if strings.Join(names, ",") != "version,put,get,quit" {
		t.Fatalf("got %v", names)
	}
}

func TestEncodeForms(t *testing.T) {
	cases := []struct {
		c    Command
		want string
	}{
		{&Put{Topic: "t", Partition: 1, Flag: 0, Checksum: Checksum([]byte("hello")), Opaque: -2147483648, Body: []byte("hello")}, "put t 1 5 0 907060870 -2147483648\r\nhello"},
		{&Put{Topic: "t", Checksum: 5, TxKey: "TX:a:1", Opaque: 1, Body: []byte("x")}, "put t 0 1 0 5 TX:a:1 1\r\nx"},
		{&Put{Topic: "t", TxKey: "TX:a:1", Opaque: 1, Body: []byte("x"), Fields: 7}, "put t 0 1 0 TX:a:1 1\r\nx"},
		{&Put{Topic: "t", Opaque: 1, Body: []byte("x"), Fields: 6}, "put t 0 1 0 1\r\nx"},
		{&Stats{Opaque: 0}, "stats  0\r\n"},
		{&Stats{Opaque: NoOpaque}, "stats\r\n"},
		{&Version{Opaque: NoOpaque}, "version\r\n"},
		{&Transaction{Tx: TxID{Kind: TxLocal, SessionID: "s", Value: 2}, SessionID: "s", Type: TxCommitOnePhase, Opaque: 4}, "transaction TX:s:2 s COMMIT_ONE_PHASE 4\r\n"},
		{NewResult(500, "x", 3), "result 500 1 3\r\nx"},
		{NewResult(200, "", 3), "result 200 0 3\r\n"},
	}
	for _, c := range cases {
		if got := string(c.c.AppendTo(nil)); got != c.want {
			t.Errorf("got %q want %q", got, c.want)
		}
	}
	if got := string(AppendResult(nil, 404, "not found", 99)); got != "result 404 9 99\r\nnot found" {
		t.Errorf("AppendResult: %q", got)
	}
}

func TestTxIDString(t *testing.T) {
	for _, k := range []string{"TX:127.0.0.1-1370000000000-1:99", "XID:1:676c6f62616c31:6272616e636831:XAMessageProducer-myhost", "null", "XID:-7:::"} {
		id, err := ParseTxKey(k)
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		if id.String() != k {
			t.Errorf("%q: String() = %q", k, id.String())
		}
	}
}
