package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	base := minimalDoc().set("topic=a", "numPartitions", "2").set("topic=b", "stat", "true")
	cases := []struct {
		name string
		new  doc
		want Changes
		line string
	}{
		{"same", base, Changes{}, "no changes"},
		{"only comments differ", base, Changes{}, "no changes"},
		{"topic added", base.set("topic=c", "numPartitions", "1"), Changes{TopicsAdded: []string{"c"}}, "topics added: c"},
		{"topic removed", base.dropSection("topic=a"), Changes{TopicsRemoved: []string{"a"}}, "topics removed: a"},
		{"topic changed", base.set("topic=a", "numPartitions", "3"), Changes{TopicsChanged: []string{"a"}}, "topics changed: a"},
		{"topic filter changed", base.set("topic=b", "group.g", "F"), Changes{TopicsChanged: []string{"b"}}, "topics changed: b"},
		{"same effective value written differently", base.set("topic=a", "numPartitions", "1+1"), Changes{}, "no changes"},
		{"explicit default is no change", base.set("topic=b", "acceptPublish", "true"), Changes{}, "no changes"},
		{"system key", base.set("system", "serverPort", "9000"),
			Changes{RestartKeys: []string{"system.serverPort", "gossip.bind", "nats.embeddedListen"}}, ""},
		{"zookeeper key", base.set("zookeeper", "zk.zkConnect", "127.0.0.1:2182"), Changes{RestartKeys: []string{"zookeeper.zk.zkConnect"}},
			"restart needed for: zookeeper.zk.zkConnect"},
		{"extension key", base.set("site", "name", "gz"), Changes{RestartKeys: []string{"site.name"}}, "restart needed for: site.name"},
		{"inherited default changes topics too", base.set("system", "stat", "true"),
			Changes{TopicsChanged: []string{"test", "a"}, RestartKeys: []string{"system.stat"}},
			"topics changed: test, a; restart needed for: system.stat"},
		{"several", base.dropSection("topic=b").set("topic=z", "stat", "false").set("topic=a", "stat", "true").set("system", "brokerId", "2"),
			Changes{TopicsAdded: []string{"z"}, TopicsChanged: []string{"a"}, TopicsRemoved: []string{"b"}, RestartKeys: []string{"system.brokerId"}},
			"topics added: z; topics changed: a; topics removed: b; restart needed for: system.brokerId"},
	}
	old, _ := mustParse(t, base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			text := c.new.String()
			if c.name == "only comments differ" {
				text = "; another comment\n" + text
			}
			n, _ := mustParseText(t, text)
			got := Diff(old, n)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got  %#v\nwant %#v", got, c.want)
			}
			if c.line != "" && got.String() != c.line {
				t.Errorf("String() = %q, want %q", got.String(), c.line)
			}
			if got.NeedsRestart() != (len(c.want.RestartKeys) > 0) || got.Empty() != (c.line == "no changes") {
				t.Errorf("NeedsRestart/Empty wrong for %v", got)
			}
			if strings.Contains(got.String(), "\n") {
				t.Errorf("String() is not one line: %q", got.String())
			}
		})
	}
	t.Run("from nothing", func(t *testing.T) {
		got := Diff(nil, old)
		if !reflect.DeepEqual(got.TopicsAdded, []string{"test", "a", "b"}) || !got.NeedsRestart() {
			t.Errorf("got %v", got)
		}
	})
}

func TestDescribe(t *testing.T) {
	d := minimalDoc().set("topic=meta-*", "numPartitions", "4").set("topic=meta-*", "group.g1", "com.example.F").
		set("site", "token", "s3cret").set("gossip", "key", "AAECAwQFBgcICQoLDA0ODw==")
	s, _ := mustParse(t, d)
	sl, _, err := ParseSlave("async_slave.properties", []byte("slaveId=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Describe(&buf, s, sl); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"[system]\nbrokerId=0\n", "maxSegmentSize=1073741824\n", "deleteWhen=0 0 6,18 * * ?\n",
		"[zookeeper]\nzk.zkConnect=127.0.0.1:2181\n", "zk.zkRoot=/meta\n",
		"[topic=test]\nnumPartitions=1\n", "[topic=meta-*]\nnumPartitions=4\n", "group.g1=com.example.F\n",
		"[replication]\nenable=true\nlisten=\n", "; slaveGroup=meta-slave-group_1\n", "; slaveMaxDelayInMills=500\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "s3cret") || strings.Contains(out, "AAECAwQFBgcICQoLDA0ODw==") {
		t.Errorf("secrets printed:\n%s", out)
	}
	// The output is itself a valid server.ini with the same effective values
	// (secrets aside, which are masked).
	s.Site.Token, s.Gossip.Key = "", nil
	back, w, err := Parse("described.ini", buf.Bytes())
	if err == nil {
		back.Site.Token, back.Gossip.Key = "", nil
	}
	if err != nil {
		// The masked gossip key is not valid base64 of 16 bytes; drop it and retry.
		fixed := strings.Replace(out, "key=********", "key=", 1)
		fixed = strings.Replace(fixed, "token=********", "token=", 1)
		back, w, err = Parse("described.ini", []byte(fixed))
	}
	if err != nil || len(w) != 0 {
		t.Fatalf("described output does not load: %v %v", err, w)
	}
	if c := Diff(s, back); !c.Empty() {
		t.Errorf("described output differs: %v", c)
	}
	// Without a slave, no slave lines.
	buf.Reset()
	if err := Describe(&buf, s, nil); err != nil || strings.Contains(buf.String(), "slaveId") {
		t.Errorf("slave lines without a slave: %v", err)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, bytes.ErrTooLarge }

func TestDescribeWriteError(t *testing.T) {
	s, _ := mustParse(t, minimalDoc())
	if err := Describe(failingWriter{}, s, nil); err == nil || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("got %v", err)
	}
}
