package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"metaq/broker/store"
)

// TestUnreplicatedListAndDecode: a saved tail is listed with its partition,
// offsets, generation and record count, and decodes into the messages it
// held, attributes included.
func TestUnreplicatedListAndDecode(t *testing.T) {
	dir := t.TempDir()
	attrBody := []byte{0, 0, 0, 3}
	attrBody = append(append(attrBody, "tag"...), "second"...)
	var recs []byte
	recs = store.AppendRecord(recs, 1, 0, []byte("first"))
	recs = store.AppendRecord(recs, 2, 1, attrBody)
	name := "my-topic-3-100-160-gen2.records"
	if err := os.WriteFile(filepath.Join(dir, name), recs, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tails, err := listUnreplicated(&out, dir)
	if err != nil || len(tails) != 1 {
		t.Fatalf("list: %v %+v", err, tails)
	}
	if tl := tails[0]; tl.Topic != "my-topic" || tl.Partition != 3 || tl.From != 100 || tl.To != 160 || tl.Generation != 2 || tl.Records != 2 {
		t.Fatalf("tail %+v", tl)
	}
	if !strings.Contains(out.String(), "my-topic-3") {
		t.Fatalf("listing %q", out.String())
	}
	msgs, err := tailMessages("my-topic", recs)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("decode: %v %d", err, len(msgs))
	}
	if string(msgs[0].Payload) != "first" || msgs[0].HasAttribute ||
		string(msgs[1].Payload) != "second" || !msgs[1].HasAttribute || msgs[1].Attribute != "tag" {
		t.Fatalf("messages %+v %+v", msgs[0], msgs[1])
	}
	out.Reset()
	if _, err := listUnreplicated(&out, filepath.Join(dir, "none")); err != nil || !strings.Contains(out.String(), "no unreplicated") {
		t.Fatalf("empty listing %q %v", out.String(), err)
	}
}

// TestUnreplicatedListNamesTheCuttingGeneration: a tail saved when
// generation 4 superseded the records (written by the master of generation
// 3) is listed under a column that says 4 is the cutting generation, not the
// one the records were written in.
func TestUnreplicatedListNamesTheCuttingGeneration(t *testing.T) {
	dir := t.TempDir()
	recs := store.AppendRecord(nil, 1, 0, []byte("acked by gen 3"))
	if err := os.WriteFile(filepath.Join(dir, "orders-0-500-530-gen4.records"), recs, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := listUnreplicated(&out, dir); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Logf("listing:\n%s", s)
	if !strings.Contains(s, "CUT AT GEN") || !strings.Contains(s, "a master of an earlier generation wrote them") {
		t.Fatalf("the generation column does not say it is the superseding generation:\n%s", s)
	}
	if strings.Contains(s, " GEN ") && !strings.Contains(s, "CUT AT GEN") {
		t.Fatalf("bare GEN column:\n%s", s)
	}
}
