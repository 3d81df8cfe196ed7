package config

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// LoadSlave reads and validates an async_slave.properties file (see Plugin files in broker/wire/doc.go):
// MetaQ's keys slaveId (required, >= 0), slaveGroup (blank means
// meta-slave-group_<slaveId>), slaveMaxDelayInMills (500) and
// autoSyncMasterConfig (false), plus this project's link keys masterAddress,
// compression (zstd), bandwidthBytesPerSec (0 = unlimited), tlsCert, tlsKey
// and tlsCA. Unknown keys are warnings (MetaQ ignores them).
func LoadSlave(path string) (*Slave, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return ParseSlave(path, data)
}

// ParseSlave is LoadSlave on bytes already read; file names them in errors.
func ParseSlave(file string, data []byte) (*Slave, []Warning, error) {
	var p problems
	r := propertiesReader(file, data, slaveKeys, &p)
	s := &Slave{
		File:          file,
		SlaveID:       -1,
		SlaveMaxDelay: DefaultSlaveMaxDelay,
		Compression:   DefaultCompression,
	}
	if k, ok := r.raw("slaveId"); !ok {
		r.required("slaveId")
	} else if v, err := strconv.ParseInt(k.Value, 10, 32); err != nil || v < 0 {
		// MetaQ reads it with Integer.parseInt, and a negative id means
		// "not a slave", which makes the slave broker refuse to start.
		r.bad(k, "an integer >= 0")
	} else {
		s.SlaveID = int(v)
	}
	s.SlaveGroup = r.str("slaveGroup", DefaultSlaveGroupPrefix+"_"+strconv.Itoa(max(s.SlaveID, 0)))
	if k, ok := r.raw("slaveMaxDelayInMills"); ok {
		v, err := strconv.ParseInt(k.Value, 10, 32)
		if err != nil || v < 0 {
			r.bad(k, "a number of milliseconds in 0..2147483647")
		} else {
			s.SlaveMaxDelay = time.Duration(v) * time.Millisecond
		}
	}
	s.AutoSyncMasterConfig = r.boolean("autoSyncMasterConfig", false)
	s.MasterAddress = r.addr("masterAddress", "")
	s.Compression = r.oneOf("compression", DefaultCompression, compressions)
	s.BandwidthBytesPerSec = r.integer("bandwidthBytesPerSec", 0, 0, math.MaxInt64)
	s.TLSCert = r.str("tlsCert", "")
	s.TLSKey = r.str("tlsKey", "")
	s.TLSCA = r.str("tlsCA", "")
	checkTLSPair(r, s.TLSCert, s.TLSKey)
	if err := p.err(); err != nil {
		return nil, p.warnings, err
	}
	return s, p.warnings, nil
}

// parseProperties reads the java.util.Properties text format: '#' and '!'
// comment lines, key=value, key:value or key value, backslash line
// continuations and escapes (\t \n \r \f \uXXXX, \x for x). It returns
// key/value pairs in file order. MetaQ reads the file as GBK; only comments
// hold non-ASCII text in practice, and those are skipped byte for byte.
func parseProperties(data []byte) [][2]string {
	var out [][2]string
	text := strings.ReplaceAll(string(data), "\r\n", "\n")
	text = strings.ReplaceAll(text, "\r", "\n")
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		// Join continuation lines: an odd number of trailing backslashes.
		for endsWithContinuation(line) && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		if endsWithContinuation(line) {
			line = line[:len(line)-1]
		}
		// The key ends at the first unescaped '=', ':' or whitespace.
		keyEnd := len(line)
		for j := 0; j < len(line); j++ {
			c := line[j]
			if c == '\\' {
				j++
				continue
			}
			if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
				keyEnd = j
				break
			}
		}
		key := line[:keyEnd]
		rest := strings.TrimLeft(line[keyEnd:], " \t\f")
		if rest != "" && (rest[0] == '=' || rest[0] == ':') {
			rest = strings.TrimLeft(rest[1:], " \t\f")
		}
		out = append(out, [2]string{unescapeProperty(key), unescapeProperty(rest)})
	}
	return out
}

func endsWithContinuation(line string) bool {
	n := 0
	for i := len(line) - 1; i >= 0 && line[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func unescapeProperty(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+4 < len(s) {
				if v, err := strconv.ParseUint(s[i+1:i+5], 16, 16); err == nil {
					b.WriteRune(rune(v))
					i += 4
					continue
				}
			}
			b.WriteByte('u')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}
