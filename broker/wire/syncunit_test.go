package wire

import (
	"bytes"
	"errors"
	"testing"
)

// TestSyncUnitRoundTrip: a sync unit encodes as its header and its sync
// frames, and decodes to the same syncs, their bodies cut from its body.
func TestSyncUnitRoundTrip(t *testing.T) {
	u := &SyncUnit{Opaque: -5, Syncs: []Sync{
		{Topic: "a", Partition: 0, Flag: 1, MsgID: 7, Checksum: Checksum([]byte("hello")), Body: []byte("hello")},
		{Topic: "b", Partition: 3, MsgID: -1, Checksum: NoChecksum, Body: []byte("x\r\ny"), Fields: 7},
		{Topic: "a", Partition: 1, MsgID: 9, Checksum: 4, Body: []byte{}},
	}}
	frame := u.AppendTo(nil)
	body := u.Syncs[0].AppendTo(nil)
	body = u.Syncs[1].AppendTo(body)
	body = u.Syncs[2].AppendTo(body)
	if want := "syncunit 3 " + itoa(len(body)) + " -5\r\n" + string(body); string(frame) != want {
		t.Fatalf("frame\n%q\nwant\n%q", frame, want)
	}
	if u.BodyLen() != len(body) {
		t.Fatalf("BodyLen %d, body %d bytes", u.BodyLen(), len(body))
	}
	cmd, n, err := DecodeBytes(append(frame, "version 1\r\n"...))
	if err != nil || n != len(frame) {
		t.Fatalf("decode: %v, %d of %d bytes", err, n, len(frame))
	}
	got, ok := cmd.(*SyncUnit)
	if !ok || got.Opaque != -5 || len(got.Syncs) != 3 {
		t.Fatalf("decoded %#v", cmd)
	}
	if got.Syncs[1].Topic != "b" || got.Syncs[1].Partition != 3 || !bytes.Equal(got.Syncs[1].Body, []byte("x\r\ny")) || got.Syncs[1].Checksum != NoChecksum {
		t.Fatalf("second sync %+v", got.Syncs[1])
	}
	if !bytes.Equal(got.AppendTo(nil), frame) {
		t.Fatalf("re-encoded %q", got.AppendTo(nil))
	}
}

func itoa(n int) string { return string(appendInt(nil, int64(n))) }

// unit is a syncunit frame of count syncs with the given body.
func unit(count int, body string) string {
	return "syncunit " + itoa(count) + " " + itoa(len(body)) + " 1\r\n" + body
}

// TestSyncUnitFatal: a sync unit whose header or syncs do not add up is
// malformed input (the connection is closed).
func TestSyncUnitFatal(t *testing.T) {
	one := string((&Sync{Topic: "t", MsgID: 1, Checksum: 2, Body: []byte("hello")}).AppendTo(nil))
	for _, c := range []struct{ name, in string }{
		{"no-syncs", "syncunit 0 0 1\r\n"},
		{"3-fields", "syncunit 1 " + itoa(len(one)) + "\r\n" + one},
		{"5-fields", "syncunit 1 " + itoa(len(one)) + " 1 2\r\n" + one},
		{"count-above-body", "syncunit 2 " + itoa(len(one)) + " 1\r\n" + one},
		{"count-huge", "syncunit 2000000000 " + itoa(len(one)) + " 1\r\n" + one},
		{"trailing", "syncunit 1 " + itoa(len(one)+2) + " 1\r\n" + one + "xx"},
		{"inner-put", unit(1, "put t 0 1 0 1 1\r\nx")},
		{"inner-long-body", unit(1, "sync t 0 9 0 1 1\r\nx")},
		{"inner-negative-body", unit(1, "sync t 0 -1 0 1 1\r\nx")},
		{"inner-6-fields", unit(1, "sync t 0 1 0 1\r\nx")},
		{"inner-no-crlf", unit(1, "sync t 0 1 0 1 1 1")},
		{"inner-blank", unit(1, "\r\n"+one)},
		{"bad-count", "syncunit x " + itoa(len(one)) + " 1\r\n" + one},
		{"wrong-word", "syncunits 1 " + itoa(len(one)) + " 1\r\n" + one},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := DecodeBytes([]byte(c.in))
			var fe *FatalError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v (%T), want *FatalError", err, err)
			}
		})
	}
}

// TestSyncUnitTooLarge: a unit's body is bounded by MaxBodySize like a
// sync's, checked before it is read.
func TestSyncUnitTooLarge(t *testing.T) {
	_, _, err := DecodeBytes([]byte("syncunit 1 16777217 1\r\n"))
	var fe *FatalError
	if !errors.As(err, &fe) || !fe.TooLarge {
		t.Fatalf("err = %v, want a FatalError TooLarge", err)
	}
}
