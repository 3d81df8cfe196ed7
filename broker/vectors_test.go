package broker

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"hash/crc32"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"metaq/broker/config"
	"metaq/broker/wire"
)

type vcase struct {
	name, setup, note string
	c                 []byte
	s                 string // hex with ?? wildcards
	regex             string
	action            string
}

func loadVectorFile(t *testing.T, name string) []vcase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(vectorDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var out []vcase
	var cur *vcase
	var chex strings.Builder
	flush := func() {
		if cur != nil {
			cur.c = mustHex(t, chex.String())
			out = append(out, *cur)
		}
		chex.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		field := func(p string) (string, bool) {
			if strings.HasPrefix(line, p) {
				return strings.TrimSpace(line[len(p):]), true
			}
			return "", false
		}
		if v, ok := field("=== "); ok {
			flush()
			cur = &vcase{name: v}
			continue
		}
		if cur == nil {
			continue
		}
		if v, ok := field("c:"); ok {
			chex.WriteString(v)
		} else if v, ok := field("s:"); ok {
			cur.s += v
		} else if v, ok := field("s-regex:"); ok {
			cur.regex = v
		} else if v, ok := field("s-action:"); ok {
			cur.action = v
		} else if v, ok := field("setup:"); ok {
			cur.setup = v
		} else if v, ok := field("note:"); ok {
			cur.note = v
		}
	}
	flush()
	if len(out) == 0 {
		t.Fatalf("%s: no cases", name)
	}
	return out
}

// latin1 renders bytes as ISO-8859-1 text, as the README says regexes apply.
func latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// wildcardEqual compares got with the hex pattern, "??" matching any byte.
func wildcardEqual(pattern string, got []byte) bool {
	if len(pattern) != 2*len(got) {
		return false
	}
	for i := range got {
		h := pattern[2*i : 2*i+2]
		if h == "??" {
			continue
		}
		v, err := strconv.ParseUint(h, 16, 8)
		if err != nil || byte(v) != got[i] {
			return false
		}
	}
	return true
}

// requestOpaque returns the opaque the request header carries (its last
// field), or NoOpaque for version/stats without one.
func requestOpaque(t *testing.T, c []byte) string {
	t.Helper()
	cmd, _, err := wire.DecodeBytes(c)
	if err != nil {
		t.Fatalf("request does not decode: %v", err)
	}
	return strconv.Itoa(int(cmd.OpaqueID()))
}

// TestVectors replays every exchange file of the spec's vectors against a
// broker started in process, with a fresh data directory per file, and
// checks the answers by the README's rules.
func TestVectors(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, f := range files {
		name := filepath.Base(f)
		if name == "message.txt" || name == "zookeeper.txt" {
			continue // reference data: TestVectorMessages, TestVectorZooKeeperChecksum
		}
		ran++
		t.Run(strings.TrimSuffix(name, ".txt"), func(t *testing.T) {
			replayFile(t, name)
		})
	}
	if ran < 8 {
		t.Fatalf("only %d vector files replayed", ran)
	}
}

type replayer struct {
	t      *testing.T
	cfg    *config.Server
	brk    *testBroker
	cl     *client
	putIDs map[int64]bool
	plain  *testBroker // sync.txt: a broker without the sync receiver
}

func replayFile(t *testing.T, name string) {
	cases := loadVectorFile(t, name)
	cfg := vectorConfig(t)
	rp := &replayer{t: t, cfg: cfg, putIDs: map[int64]bool{}}
	if name == "transaction.txt" && VectorTxHandler == nil {
		t.Fatal("transaction.txt needs VectorTxHandler, set by txvec_ext_test.go")
	}
	rp.brk = startBroker(t, cfg, func(o *Options) {
		o.SyncReceiver = name == "sync.txt"
	})
	if name == "transaction.txt" {
		rp.brk.SetTxHandler(VectorTxHandler(t, rp.brk.store, rp.brk.Broker))
	}
	rp.cl = dial(t, rp.brk.Addr())
	for _, vc := range cases {
		ok := t.Run(vc.name, func(t *testing.T) { rp.runCase(t, vc) })
		if !ok {
			return // later cases depend on earlier ones
		}
	}
}

func (rp *replayer) runCase(t *testing.T, vc vcase) {
	cl := rp.cl
	if strings.Contains(vc.setup, "WITHOUT") {
		// sync-to-plain-broker: a broker without the sync receiver.
		if rp.plain == nil {
			rp.plain = startBroker(t, rp.cfg, nil)
		}
		cl = dial(t, rp.plain.Addr())
	}
	cl.send(vc.c)
	switch vc.action {
	case "close":
		cl.expectClosed(3 * time.Second)
		rp.cl = dial(t, rp.brk.Addr())
		return
	case "none":
		cl.expectSilence(1500 * time.Millisecond)
		return
	}
	got, err := cl.readRaw(10 * time.Second)
	if err != nil {
		t.Fatalf("read answer: %v (got %q)", err, got)
	}
	hdrEnd := bytes.Index(got, []byte("\r\n"))
	hdr := strings.Split(string(got[:hdrEnd]), " ")
	body := got[hdrEnd+2:]
	// General rules: the length is the body's, the opaque is the request's.
	var lenField string
	if hdr[0] == "result" {
		lenField = hdr[2]
	} else {
		lenField = hdr[1]
	}
	if lenField != strconv.Itoa(len(body)) {
		t.Errorf("length field %s, body has %d bytes", lenField, len(body))
	}
	if op := hdr[len(hdr)-1]; op != requestOpaque(t, vc.c) {
		t.Errorf("opaque %s, request had %s", op, requestOpaque(t, vc.c))
	}
	switch {
	case vc.name == "stats-config":
		want := (&wire.Result{Code: 200, Body: rp.cfg.Raw, Opaque: -2147483642}).AppendTo(nil)
		if !bytes.Equal(got, want) {
			t.Errorf("stats config: got %q\nwant %q", got, want)
		}
	case vc.regex != "":
		re, err := regexp.Compile(vc.regex)
		if err != nil {
			t.Fatalf("bad regex: %v", err)
		}
		s := latin1(got)
		if loc := re.FindStringIndex(s); loc == nil || loc[0] != 0 || loc[1] != len(s) {
			t.Errorf("answer %q does not match %s", got, vc.regex)
		}
	default:
		if !wildcardEqual(vc.s, got) {
			want, _ := hex.DecodeString(strings.ReplaceAll(vc.s, "??", "3f"))
			t.Errorf("answer\n%q\nwant\n%q", got, want)
		}
	}
	// Remember the ids puts got; check every record of a value.
	if hdr[0] == "result" && hdr[1] == "200" && (bytes.HasPrefix(vc.c, []byte("put ")) || bytes.HasPrefix(vc.c, []byte("sync "))) {
		f := strings.Split(string(body), " ")
		id, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || len(f) != 3 {
			t.Fatalf("put answer %q is not 'id partition offset'", body)
		}
		rp.putIDs[id] = true
	}
	if hdr[0] == "value" {
		if len(body) == 0 {
			t.Error("value with no data")
		}
		recs, _ := parseRecords(t, body)
		for i, r := range recs {
			if vc.name == "get-unaligned-offset" {
				break // starts inside a record on purpose
			}
			if r.crc != int32(crc32.ChecksumIEEE(r.body)&0x7FFFFFFF) {
				t.Errorf("record %d: bad CRC", i)
			}
			if !rp.putIDs[r.id] {
				t.Errorf("record %d: id %d was not returned by a put", i, r.id)
			}
		}
	}
}

// TestVectorMessages checks message.txt: each body put with its flag is
// stored and fetched back as exactly the record given, except the id,
// which is the one the put returned.
func TestVectorMessages(t *testing.T) {
	cases := loadVectorFile(t, "message.txt")
	data, _ := os.ReadFile(filepath.Join(vectorDir, "message.txt"))
	flags := map[string]int32{}
	var cur string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "=== ") {
			cur = strings.TrimSpace(line[4:])
		}
		if strings.HasPrefix(line, "flag:") {
			v, _ := strconv.Atoi(strings.TrimSpace(line[5:]))
			flags[cur] = int32(v)
		}
	}
	brk := startBroker(t, vectorConfig(t), nil)
	cl := dial(t, brk.Addr())
	var off int64
	for i, vc := range cases {
		want := mustHex(t, vc.s)
		cl.sendCmd(&wire.Put{Topic: "test", Partition: 0, Flag: flags[vc.name], Checksum: wire.Checksum(vc.c), Body: vc.c, Opaque: int32(i)})
		r := cl.result()
		if !r.OK() {
			t.Fatalf("%s: put: %s", vc.name, r)
		}
		f := strings.Split(string(r.Body), " ")
		id, _ := strconv.ParseInt(f[0], 10, 64)
		if f[2] != strconv.FormatInt(off, 10) {
			t.Fatalf("%s: offset %s want %d", vc.name, f[2], off)
		}
		cl.sendCmd(&wire.Get{Topic: "test", Group: "g", Partition: 0, Offset: off, MaxSize: 1 << 20, Opaque: int32(100 + i)})
		v, ok := cl.read().(*wire.Value)
		if !ok {
			t.Fatalf("%s: get did not answer value", vc.name)
		}
		if len(v.Data) != len(want) {
			t.Fatalf("%s: record %x want %x", vc.name, v.Data, want)
		}
		for j := range want {
			if j >= 8 && j < 16 {
				continue
			}
			if v.Data[j] != want[j] {
				t.Fatalf("%s: record %x want %x (ids excepted)", vc.name, v.Data, want)
			}
		}
		recs, _ := parseRecords(t, v.Data)
		if len(recs) != 1 || recs[0].id != id {
			t.Fatalf("%s: stored id %v, put answered %d", vc.name, recs, id)
		}
		off += int64(len(want))
	}
}

// TestVectorZooKeeperChecksum checks the one value of zookeeper.txt that
// the broker itself computes: master_config_checksum (and config_checksum
// in stats) is the unsigned CRC32 of the config file bytes.
func TestVectorZooKeeperChecksum(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(vectorDir, "zookeeper.txt"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`master_config_checksum E = (\d+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no master_config_checksum in zookeeper.txt")
	}
	cfg := vectorConfig(t)
	if got := strconv.FormatUint(uint64(crc32.ChecksumIEEE(cfg.Raw)), 10); got != string(m[1]) {
		t.Fatalf("crc32(server.ini) = %s, zookeeper.txt says %s", got, m[1])
	}
	brk := startBroker(t, cfg, nil)
	if !strings.Contains(brk.Stats(""), "config_checksum "+string(m[1])+"\r\n") {
		t.Fatalf("stats does not report config_checksum %s:\n%s", m[1], brk.Stats(""))
	}
}
