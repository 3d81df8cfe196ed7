package wire

import "bytes"

// The two frames a pipelined producer's connection carries by the hundred
// thousand per second, a plain put and its result, are decoded straight
// from the line's bytes when they have exactly the usual form. Anything
// else goes to the general decoder, which gives every line MetaQ's exact
// answer or error; FuzzPlainPut and FuzzPlainResult check that both agree
// on every line the fast path takes.

// splitFields splits line[start:] on single spaces into f, and reports how
// many fields there are. It reports ok=false for a non-ASCII byte, an
// empty field (two spaces, or one at either end) or more fields than f has
// room for.
func splitFields(line []byte, start int, f [][]byte) (n int, ok bool) {
	for i := start; i <= len(line); i++ {
		if i < len(line) {
			c := line[i]
			if c >= 0x80 {
				return 0, false
			}
			if c != ' ' {
				continue
			}
		}
		if i == start || n == len(f) {
			return 0, false
		}
		f[n] = line[start:i]
		n++
		start = i + 1
	}
	return n, true
}

// decodePlainPut decodes the put every producer sends outside a
// transaction, `put topic partition bodyLen flag [checksum] opaque`, straight
// from the line's bytes: no string for the line, no split, and the topic's
// string reused while it repeats. It reports ok=false, having read nothing,
// for any line it does not fully accept (another command, a transaction key,
// non-ASCII bytes, an empty or non-decimal field, an int32 overflow): the
// general decoder then gives that line MetaQ's exact answer or error.
func (d *Decoder) decodePlainPut(line []byte) (Command, bool, error) {
	const prefix = "put "
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return nil, false, nil
	}
	var f [6][]byte
	n, ok := splitFields(line, len(prefix), f[:])
	// Fields after the command: topic, partition, bodyLen, flag, then
	// opaque (6 in all) or checksum and opaque (7 in all).
	if !ok || (n != 5 && n != 6) {
		return nil, false, nil
	}
	var nums [5]int32
	if !parseDecimals(f[1:n], nums[:]) {
		return nil, false, nil
	}
	size := nums[1]
	if size < 0 {
		return nil, false, nil
	}
	var c *Put
	if d.Reuse {
		c = &d.put
		*c = Put{}
	} else {
		c = new(Put)
	}
	c.Topic, c.Partition, c.Flag, c.Checksum, c.Fields = d.internTopic(f[0]), nums[0], nums[2], NoChecksum, n+1
	if n == 6 {
		c.Checksum, c.Opaque = nums[3], nums[4]
	} else {
		c.Opaque = nums[3]
	}
	body, err := d.readBodyN("put", size)
	if err != nil {
		return nil, true, err
	}
	c.Body = body
	return c, true, nil
}

// decodePlainResult decodes `result code bodyLen opaque` with its body the
// same way: ok=false, having read nothing, for anything but exactly that
// with decimal fields.
func (d *Decoder) decodePlainResult(line []byte) (Command, bool, error) {
	const prefix = "result "
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return nil, false, nil
	}
	var f [3][]byte
	if n, ok := splitFields(line, len(prefix), f[:]); !ok || n != 3 {
		return nil, false, nil
	}
	var nums [3]int32
	if !parseDecimals(f[:], nums[:]) {
		return nil, false, nil
	}
	if nums[1] < 0 {
		return nil, false, nil
	}
	body, err := d.readBodyN("result", nums[1])
	if err != nil {
		return nil, true, err
	}
	var c *Result
	if d.Reuse {
		c = &d.result
	} else {
		c = new(Result)
	}
	c.Code, c.Body, c.Opaque = int(nums[0]), body, nums[2]
	return c, true, nil
}

// internTopic returns b as a string, reusing the previous topic's string
// when it is the same: a producer connection mostly sends to one topic.
func (d *Decoder) internTopic(b []byte) string {
	if string(b) != d.topic {
		d.topic = string(b)
	}
	return d.topic
}

// parseDecimals parses each of fields into nums with parseDecimal32 and
// reports whether all of them parsed.
func parseDecimals(fields [][]byte, nums []int32) bool {
	for i, b := range fields {
		v, ok := parseDecimal32(b)
		if !ok {
			return false
		}
		nums[i] = v
	}
	return true
}

// parseDecimal32 parses an optional '-' and 1-10 ASCII digits within the
// int32 range. Whatever it refuses, the general decoder judges as Java's
// Integer.parseInt does.
func parseDecimal32(b []byte) (int32, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 10 {
		return 0, false
	}
	var v int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	if v < -1<<31 || v > 1<<31-1 {
		return 0, false
	}
	return int32(v), true
}
