package config

import (
	"slices"
	"strings"
	"testing"
)

// TestReplicationSites: [replication] sites is parsed into a sorted list;
// a list that lacks this site, names one twice or names more than
// MaxSites sites is refused, naming the key.
func TestReplicationSites(t *testing.T) {
	base := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n[topic=t]\n[site]\nname=hf\n[replication]\n"
	for _, tc := range []struct {
		keys string
		want []string
	}{
		{"", nil},
		{"sites=\n", nil},
		{"sites=hf,bj,gz\n", []string{"bj", "gz", "hf"}},
		{"sites= gz , hf ,bj,\n", []string{"bj", "gz", "hf"}},
		{"sites=hf\n", []string{"hf"}},
	} {
		s, _, err := Parse("server.ini", []byte(base+tc.keys))
		if err != nil {
			t.Fatalf("%q: %v", tc.keys, err)
		}
		if !slices.Equal(s.Replication.Sites, tc.want) {
			t.Errorf("%q: Sites = %v, want %v", tc.keys, s.Replication.Sites, tc.want)
		}
	}
	many := make([]string, MaxSites+1)
	for i := range many {
		many[i] = "s" + strings.Repeat("x", i)
	}
	many[0] = "hf"
	for _, tc := range []struct{ keys, want string }{
		{"sites=bj,gz\n", "names this site"},
		{"sites=bj,hf,bj\n", "listed twice"},
		{"sites=" + strings.Join(many, ",") + "\n", "at most 64"},
	} {
		if _, _, err := Parse("server.ini", []byte(base+tc.keys)); err == nil || !strings.Contains(err.Error(), "sites") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error naming sites and %q", tc.keys, err, tc.want)
		}
	}
}

// TestReplicationSitesInASharedFile: a shared server.ini that names no site
// (deploy/'s common file, as `configsync push` validates it before any
// site's overlay names one) may list the sites; the check that the list
// names this site applies where the site's name is written. The push of
// deploy/'s layout failed on it ("[replication] sites = \"bj,gz,hf\": expected
// a list that names this site ([site] name=default)").
func TestReplicationSitesInASharedFile(t *testing.T) {
	shared := "[system]\nbrokerId=0\nnumPartitions=1\nunflushThreshold=0\nunflushInterval=1000\nmaxSegmentSize=1048576\nmaxTransferSize=1048576\ndeletePolicy=delete,168\ndataPath=/tmp/x\n[zookeeper]\nzk.zkEnable=false\n[topic=t]\n[replication]\nsites=bj,gz,hf\n"
	s, _, err := Parse("server.ini", []byte(shared))
	if err != nil {
		t.Fatalf("a shared file listing the sites: %v", err)
	}
	if want := []string{"bj", "gz", "hf"}; !slices.Equal(s.Replication.Sites, want) {
		t.Fatalf("Sites = %v, want %v", s.Replication.Sites, want)
	}
	if _, _, err := Parse("server.ini", []byte(shared+"[site]\nname=sh\n")); err == nil || !strings.Contains(err.Error(), "names this site") {
		t.Fatalf("a file naming a site the list lacks: %v, want the list refused", err)
	}
}
