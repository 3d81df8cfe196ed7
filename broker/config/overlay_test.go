package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const siteOverlay = `;; bj overlay
[system]
hostName=127.0.0.9
serverPort=9123
dataPath=/srv/bj

[zookeeper]
zk.zkConnect=127.0.0.1:2182

[site]
name=bj

[gossip]
label=bj
`

func TestParseWithOverlay(t *testing.T) {
	base := []byte(minimalDoc().set("system", "hostName", "127.0.0.1").set("system", "dataPath", "/srv/base").String())
	s, w, err := ParseWithOverlay("server.ini", base, "site.ini", []byte(siteOverlay))
	if err != nil || len(w) != 0 {
		t.Fatalf("err %v, warnings %v", err, w)
	}
	if s.System.HostName != "127.0.0.9" || s.System.ServerPort != 9123 || s.System.DataPath != "/srv/bj" ||
		s.ZooKeeper.Connect != "127.0.0.1:2182" || s.Site.Name != "bj" || s.Gossip.Label != "bj" || !s.Gossip.Enable {
		t.Errorf("overlay not applied: %+v %+v %+v %+v", s.System, s.ZooKeeper, s.Site, s.Gossip)
	}
	// Defaults derive from the overlaid values.
	if s.Replication.Listen != "" || s.Gossip.Bind != "127.0.0.1:9126" || s.Topics[0].DataPath != "/srv/bj" {
		t.Errorf("derived values: %q %q %q", s.Replication.Listen, s.Gossip.Bind, s.Topics[0].DataPath)
	}
	// Raw and Checksum are the shared file's: that is what configsync ships.
	plain, _, _ := Parse("server.ini", base)
	if string(s.Raw) != string(base) || s.Checksum != plain.Checksum || s.File != "server.ini" {
		t.Errorf("raw/checksum must be the base file's")
	}
	// Keys the overlay does not name keep the base value.
	if s.System.NumPartitions != 1 || s.System.UnflushThreshold != 0 {
		t.Errorf("base values lost: %+v", s.System)
	}
}

func TestOverlayProblemsNameTheOverlay(t *testing.T) {
	base := []byte(minimalDoc().String())
	_, w, err := ParseWithOverlay("server.ini", base, "site.ini", []byte("[system]\nserverPort=x\nhostNmae=a\n[site]\noverlay=other.ini\n"))
	l := errorList(t, err)
	if len(l) != 1 || l[0].File != "site.ini" || l[0].Key != "serverPort" {
		t.Errorf("errors: %v", err)
	}
	if got, ok := findWarning(w, "system", "hostNmae"); !ok || got.File != "site.ini" {
		t.Errorf("unknown key warning should name the overlay: %v", w)
	}
	if got, ok := findWarning(w, "site", "overlay"); !ok || got.File != "site.ini" {
		t.Errorf("nested overlay warning: %v", w)
	}
	// A bad value left in the base keeps naming the base.
	_, _, err = ParseWithOverlay("server.ini", []byte(minimalDoc().set("system", "stat", "x").String()), "site.ini", []byte(siteOverlay))
	if l := errorList(t, err); l[0].File != "server.ini" {
		t.Errorf("errors: %v", err)
	}
	// An overlay can also fix the base: the overlay's value is the one checked.
	_, _, err = ParseWithOverlay("server.ini", []byte(minimalDoc().set("system", "stat", "x").String()), "site.ini", []byte("[system]\nstat=true\n"))
	if err != nil {
		t.Errorf("overlay value should replace the base value: %v", err)
	}
}

func TestOverlayEmptyIsParse(t *testing.T) {
	base := []byte(minimalDoc().String())
	a, _, err1 := ParseWithOverlay("server.ini", base, "", nil)
	b, _, err2 := Parse("server.ini", base)
	if err1 != nil || err2 != nil || !Diff(a, b).Empty() {
		t.Errorf("differ: %v %v %v", err1, err2, Diff(a, b))
	}
}

func TestLoadFollowsSiteOverlay(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "server.ini")
	if err := os.WriteFile(path, []byte(minimalDoc().set("site", "overlay", "site.ini").String()), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(path)
	l := errorList(t, err)
	if l[0].Section != "site" || l[0].Key != "overlay" || !strings.Contains(l[0].Expected, "readable overlay") {
		t.Errorf("missing overlay: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "site.ini"), []byte(siteOverlay), 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Site.Name != "bj" || s.System.ServerPort != 9123 || s.Site.Overlay != "site.ini" {
		t.Errorf("overlay not followed: %+v %+v", s.Site, s.System.ServerPort)
	}
	// Parse never reads the disk, so it ignores overlay=.
	data, _ := os.ReadFile(path)
	s, _, err = Parse(path, data)
	if err != nil || s.Site.Name != "default" {
		t.Errorf("Parse followed the overlay: %v %+v", err, s.Site)
	}
}

// TestConfSiteExample: the sample overlay in conf/ applies to the sample
// server.ini.
func TestConfSiteExample(t *testing.T) {
	base, err := os.ReadFile("../../conf/server.ini")
	if err != nil {
		t.Fatal(err)
	}
	over, err := os.ReadFile("../../conf/site.ini.example")
	if os.IsNotExist(err) {
		t.Skip("conf/site.ini.example not present")
	}
	if err != nil {
		t.Fatal(err)
	}
	s, w, err := ParseWithOverlay("conf/server.ini", base, "conf/site.ini.example", over)
	if err != nil || len(w) != 0 {
		t.Fatalf("err %v, warnings %v", err, w)
	}
	if s.Site.Name != "bj" || s.System.DataPath != "/var/lib/metaq/data" {
		t.Errorf("overlay not applied: %+v %q", s.Site, s.System.DataPath)
	}
}
