package wire

import (
	"bufio"
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// fastPath is one of the Decoder's fast paths.
type fastPath func(d *Decoder, line []byte) (Command, bool, error)

var (
	plainPut    fastPath = (*Decoder).decodePlainPut
	plainResult fastPath = (*Decoder).decodePlainResult
)

// decodeBoth decodes frame with the plain-put path and with the general
// decoder alone. ok reports whether the plain-put path took the line.
func decodeBoth(t *testing.T, frame []byte, maxBody int) (fast, general Command, fastErr, generalErr error, ok bool) {
	t.Helper()
	return decodeBothWith(t, plainPut, frame, maxBody)
}

// decodeBothWith decodes frame with the fast path fp and with the general
// decoder alone. ok reports whether fp took the line.
func decodeBothWith(t *testing.T, fp fastPath, frame []byte, maxBody int) (fast, general Command, fastErr, generalErr error, ok bool) {
	t.Helper()
	a := NewDecoder(bufio.NewReader(bytes.NewReader(frame)))
	a.MaxBodySize = maxBody
	line, err := a.readLine()
	if err != nil {
		return nil, nil, nil, nil, false
	}
	fast, ok, fastErr = fp(a, line)
	b := NewDecoder(bufio.NewReader(bytes.NewReader(frame)))
	b.MaxBodySize = maxBody
	line, err = b.readLine()
	if err != nil {
		t.Fatalf("second read of %q: %v", frame, err)
	}
	general, generalErr = b.decodeLine(string(line))
	return fast, general, fastErr, generalErr, ok
}

// checkSame fails unless the plain-put path, when it takes the frame,
// decodes it exactly as the general decoder does.
func checkSame(t *testing.T, frame []byte) bool {
	t.Helper()
	return checkSameWith(t, plainPut, frame)
}

// checkSameWith fails unless the fast path fp, when it takes the frame,
// decodes it exactly as the general decoder does.
func checkSameWith(t *testing.T, fp fastPath, frame []byte) bool {
	t.Helper()
	fast, general, fastErr, generalErr, ok := decodeBothWith(t, fp, frame, 64)
	if !ok {
		return false
	}
	if (fastErr == nil) != (generalErr == nil) {
		t.Fatalf("%q: plain-put path error %v, general decoder %v", frame, fastErr, generalErr)
	}
	if fastErr != nil {
		var f1, f2 *FatalError
		if errors.As(fastErr, &f1) != errors.As(generalErr, &f2) || (f1 != nil && f1.TooLarge != f2.TooLarge) {
			t.Fatalf("%q: plain-put path error %v, general decoder %v", frame, fastErr, generalErr)
		}
		return true
	}
	if !reflect.DeepEqual(fast, general) {
		t.Fatalf("%q: plain-put path %#v, general decoder %#v", frame, fast, general)
	}
	return true
}

func TestPlainPutMatchesGeneralDecoder(t *testing.T) {
	taken := []string{
		"put test 0 5 0 1\r\nhello",
		"put test 3 5 7 907060870 -2147483648\r\nhello",
		"put test -1 0 0 -1 2147483647\r\n",
		"put test 007 5 -0 -1 1\r\nhello",
		"put test 0 5 0 1\r\nhel", // body cut short
		"put test 0 65 0 1\r\n",   // body over the limit
	}
	declined := []string{
		"put test 0 5 0 TX:abc:1 1\r\nhello",    // transactional, old form
		"put test 0 5 0 12 TX:abc:1 1\r\nhello", // transactional
		"put test  0 5 0 1\r\nhello",            // empty field
		"put test 0 5 0 1 \r\nhello",            // trailing space (Java drops it)
		"put t\u00e9st 0 5 0 1\r\nhello",        // non-ASCII
		"put test 0 5 0 2147483648 1\r\nhello",  // int32 overflow
		"put test 0 -5 0 1\r\nhello",            // negative length
		"put test 0 5 0\r\nhello",               // too few fields
		"put test 0 5 0 1 2 3\r\nhello",         // too many
		"putx test 0 5 0 1\r\nhello",            // another word
		"put test 0 5 0 +1 1\r\nhello",          // '+' checksum: a TxKey to MetaQ
		"put test 0 5 0 -1 +1\r\nhello",         // '+' is left to the general decoder
		"put test 0 05x 0 1\r\nhello",           // not a number
		"get test g 0 0 1024 1\r\n",             // another command
	}
	for _, s := range taken {
		if !checkSame(t, []byte(s)) {
			t.Errorf("%q: not taken by the plain-put path", s)
		}
	}
	for _, s := range declined {
		if _, _, _, _, ok := decodeBoth(t, []byte(s), 64); ok {
			t.Errorf("%q: taken by the plain-put path, want the general decoder", s)
		}
	}
	// A cut-short body and an oversized one are errors on both paths.
	for _, s := range taken[4:] {
		if _, _, fastErr, _, ok := decodeBoth(t, []byte(s), 64); !ok || fastErr == nil {
			t.Errorf("%q: plain-put path ok=%v err=%v, want an error", s, ok, fastErr)
		}
	}
}

func TestInternTopicReusesString(t *testing.T) {
	var d Decoder
	a := d.internTopic([]byte("bench"))
	b := d.internTopic([]byte("bench"))
	if a != "bench" || b != "bench" || d.internTopic([]byte("other")) != "other" {
		t.Fatalf("interned %q %q", a, b)
	}
	if allocs := testing.AllocsPerRun(100, func() { d.internTopic([]byte("other")) }); allocs != 0 {
		t.Fatalf("a repeated topic allocates %v times", allocs)
	}
}

// FuzzPlainPut checks that the plain-put path decodes every line it takes
// exactly as the general decoder does.
func FuzzPlainPut(f *testing.F) {
	for _, s := range []string{"put test 0 5 0 1\r\nhello", "put test 3 5 7 907060870 -2147483648\r\nhello",
		"put test 0 5 0 TX:abc:1 1\r\nhello", "put t -1 0 0 -1 1\r\n", "put t 0 2 0 +5 1\r\nhi"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkSame(t, frame)
	})
}

func TestPlainResultMatchesGeneralDecoder(t *testing.T) {
	taken := []string{
		"result 200 30 7\r\n-5468924126146068480 0 1048576",
		"result 500 0 -2147483648\r\n",
		"result 200 3 1\r\nab", // body cut short
		"result 200 65 1\r\n",  // body over the limit
	}
	declined := []string{
		"result 200 3 1 extra\r\nabc", // MetaQ ignores the extra field; the general decoder keeps that rule
		"result  200 3 1\r\nabc",
		"result 200 3\r\nabc",
		"result 200 -3 1\r\nabc",
		"result 2x0 3 1\r\nabc",
		"result 200 3 +1\r\nabc",
		"resultx 200 3 1\r\nabc",
		"put test 0 5 0 1\r\nhello",
	}
	for _, s := range taken {
		if !checkSameWith(t, plainResult, []byte(s)) {
			t.Errorf("%q: not taken by the plain-result path", s)
		}
	}
	for _, s := range declined {
		if _, _, _, _, ok := decodeBothWith(t, plainResult, []byte(s), 64); ok {
			t.Errorf("%q: taken by the plain-result path, want the general decoder", s)
		}
	}
	for _, s := range taken[2:] {
		if _, _, fastErr, _, ok := decodeBothWith(t, plainResult, []byte(s), 64); !ok || fastErr == nil {
			t.Errorf("%q: plain-result path ok=%v err=%v, want an error", s, ok, fastErr)
		}
	}
}

// FuzzPlainResult checks that the plain-result path decodes every line it
// takes exactly as the general decoder does.
func FuzzPlainResult(f *testing.F) {
	for _, s := range []string{"result 200 30 7\r\n-5468924126146068480 0 1048576", "result 500 0 -1\r\n",
		"result 200 3 1 x\r\nabc", "result 403 5 2\r\nhello"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		checkSameWith(t, plainResult, frame)
	})
}

// With Reuse a Decoder returns its plain puts and results in one object of
// its own each, overwritten by the next Decode, with the same fields a fresh
// one would have (the previous frame's fields gone); without it, each frame
// is a new object.
func TestDecoderReuse(t *testing.T) {
	stream := "put a 3 2 1 9 5\r\nhiput b 4 3 0 6\r\nyes" +
		"result 200 2 7\r\nokresult 404 0 8\r\n" +
		"put c 5 1 2 3\r\nx"
	decodeAll := func(reuse bool) []Command {
		d := NewDecoder(bufio.NewReader(bytes.NewReader([]byte(stream))))
		d.Reuse = reuse
		var out []Command
		for {
			c, err := d.Decode()
			if err != nil {
				return out
			}
			switch x := c.(type) { // copy, as a caller keeping it must
			case *Put:
				y := *x
				out = append(out, &y)
			case *Result:
				y := *x
				out = append(out, &y)
			}
		}
	}
	fresh, reused := decodeAll(false), decodeAll(true)
	if len(fresh) != 5 || !reflect.DeepEqual(fresh, reused) {
		t.Fatalf("reused decoding differs:\n fresh  %+v\n reused %+v", fresh, reused)
	}
	if p := fresh[1].(*Put); p.Checksum != NoChecksum || p.Opaque != 6 || string(p.Body) != "yes" {
		t.Fatalf("second put kept the first's fields: %+v", p)
	}

	d := NewDecoder(bufio.NewReader(bytes.NewReader([]byte(stream))))
	d.Reuse = true
	p1, _ := d.Decode()
	p2, _ := d.Decode()
	r1, _ := d.Decode()
	r2, _ := d.Decode()
	if p1 != p2 || r1 != r2 {
		t.Fatalf("with Reuse: puts %p %p, results %p %p, want one object each", p1, p2, r1, r2)
	}
	d = NewDecoder(bufio.NewReader(bytes.NewReader([]byte(stream))))
	q1, _ := d.Decode()
	q2, _ := d.Decode()
	if q1 == q2 {
		t.Fatal("without Reuse two puts share one object")
	}
}

// With Reuse the fast paths allocate nothing but the body.
func TestDecoderReuseAllocatesOnlyBodies(t *testing.T) {
	frame := []byte("put a 3 2 1 9 5\r\nhiresult 200 2 7\r\nok")
	buf := make([]byte, 2)
	r := bytes.NewReader(frame)
	d := NewDecoder(bufio.NewReader(r))
	d.Reuse = true
	d.Alloc = func(n int) []byte { return buf[:n] }
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(frame)
		d.r.Reset(r)
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Decode(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding a plain put and a plain result with Reuse: %v allocations, want 0", allocs)
	}
}
