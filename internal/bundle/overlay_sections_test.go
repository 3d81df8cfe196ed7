package bundle

import (
	"strings"
	"testing"

	"metaq/broker/config"
)

// TestOverlayWritesEachSectionOnce: a site's overlay with sections of its
// own in extraOverlay (a second broker's [system] brokerId and [nats]
// agent, a slave's [system] segment size, the fixture's [zookeeper] and
// [replication]) writes every section once, so loading it warns of no
// repeated section or key, and extraOverlay's values are the ones taken.
func TestOverlayWritesEachSectionOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shared := sharedINI("", "", "[topic=orders]\nnumPartitions=2\n")
	for _, c := range []struct {
		name string
		spec siteSpec
		// check looks at the loaded configuration.
		check func(*config.Server) string
	}{
		{"second broker of a site", siteSpec{name: "bj", natsListen: "127.0.0.1:1", extraOverlay: "[system]\nbrokerId=2\n[nats]\nagent=bj-2\nurl=nats://127.0.0.1:1\n"},
			func(s *config.Server) string {
				if s.System.BrokerID != 2 || s.NATS.Agent != "bj-2" || s.NATS.URL != "nats://127.0.0.1:1" {
					return "brokerId, agent or url not the overlay's"
				}
				return ""
			}},
		{"slave with a segment size", siteSpec{name: "hf", slave: true, slaveID: 1, natsURL: "nats://127.0.0.1:1", extraOverlay: "[system]\nmaxSegmentSize=4096\n"},
			func(s *config.Server) string {
				if s.System.MaxSegmentSize != 4096 {
					return "maxSegmentSize not the overlay's"
				}
				return ""
			}},
		{"fixture site", siteSpec{name: "gz", noNATS: true, extraOverlay: "[zookeeper]\nzk.zkConnect=127.0.0.1:2\n\n[replication]\nlisten=127.0.0.1:7\n\n[site]\nforwardPuts=true\n"},
			func(s *config.Server) string {
				if s.Replication.Listen != "127.0.0.1:7" || !s.Site.ForwardPuts {
					return "replication listen or forwardPuts not the overlay's"
				}
				return ""
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			overlay := overlayINI(c.spec, dir, 1234)
			s, warns, err := config.ParseWithOverlay("server.ini", []byte(shared), "site.ini", []byte(overlay))
			if err != nil {
				t.Fatalf("%v\n%s", err, overlay)
			}
			for _, w := range warns {
				if strings.Contains(w.Message, "more than once") || strings.Contains(w.Message, "times;") {
					t.Errorf("warning: %s", w)
				}
			}
			if msg := c.check(s); msg != "" {
				t.Errorf("%s:\n%s", msg, overlay)
			}
		})
	}
}
