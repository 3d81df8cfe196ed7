package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"metaq/broker/config"
)

// TestDeployLayout loads deploy/common/server.ini with each host's overlay
// and slave properties as they are installed (/etc/metaq/{server.ini,
// site.ini,async_slave.properties}) and checks which components each
// bundle runs: two brokers per site (brokerIds 1 and 2, set only in the
// overlays), masters at bj, slaves at hf and gz, one configsync agent each.
func TestDeployLayout(t *testing.T) {
	t.Parallel()
	deploy := filepath.Join("..", "..", "deploy")
	shared, err := os.ReadFile(filepath.Join(deploy, "common", "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(shared), "\nbrokerId=") {
		t.Error("the shared server.ini sets brokerId: it belongs to each host's overlay")
	}
	master := []string{compTxn, compShipper, compConfig, compDashboard, compTopology, compRepair}
	slave := []string{compTxn, compReceiver, compConfig, compDashboard, compTopology, compRepair}
	want := map[string][]string{"bj-1": master, "bj-2": master, "hf-1": slave, "hf-2": slave, "gz-1": slave, "gz-2": slave}
	for host, comps := range want {
		site, idText, _ := strings.Cut(host, "-")
		id := int(idText[0] - '0')
		t.Run(host, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "server.ini"), shared, 0o644)
			ov, err := os.ReadFile(filepath.Join(deploy, host, "site.ini"))
			if err != nil {
				t.Fatal(err)
			}
			// The placeholders an operator replaces.
			ovs := strings.ReplaceAll(string(ov), "REPLACE_WITH_BASE64_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
			ovs = strings.ReplaceAll(ovs, "REPLACE_WITH_CONFIGSYNC_PUBLIC_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
			os.WriteFile(filepath.Join(dir, "site.ini"), []byte(ovs), 0o644)
			opts := Options{ConfigPath: filepath.Join(dir, "server.ini")}
			if site != "bj" {
				props, err := os.ReadFile(filepath.Join(deploy, host, "async_slave.properties"))
				if err != nil {
					t.Fatal(err)
				}
				opts.Mode, opts.PluginPath = ModeSlave, filepath.Join(dir, "async_slave.properties")
				os.WriteFile(opts.PluginPath, props, 0o644)
			}
			b, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := b.Config()
			if cfg.Site.Name != site || cfg.System.BrokerID != id || cfg.System.HostName != fmt.Sprintf("metaq-%d.%s.example.net", id, site) {
				t.Errorf("site %q broker %d host %q", cfg.Site.Name, cfg.System.BrokerID, cfg.System.HostName)
			}
			if cfg.NATS.Agent != host {
				t.Errorf("configsync agent %q, want %q", cfg.NATS.Agent, host)
			}
			if !strings.Contains(cfg.ZooKeeper.Connect, "zk-1."+site+".example.net") || !strings.HasPrefix(cfg.NATS.URL, "nats://nats-1."+site) {
				t.Errorf("zk %q nats %q", cfg.ZooKeeper.Connect, cfg.NATS.URL)
			}
			if len(cfg.Gossip.Key) != 32 || !cfg.Gossip.Enable {
				t.Errorf("gossip key %d bytes, enable %v", len(cfg.Gossip.Key), cfg.Gossip.Enable)
			}
			var got []string
			for _, c := range builtinComponents(b) {
				got = append(got, c.Name())
			}
			if !reflect.DeepEqual(got, comps) {
				t.Errorf("components %v, want %v", got, comps)
			}
			if embedsNATS(b) {
				t.Error("a deployed site must use its NATS cluster, not an embedded server")
			}
			if b.Slave != nil && (b.Slave.MasterAddress != fmt.Sprintf("metaq-%d.bj.example.net:8124", id) || b.Slave.AutoSyncMasterConfig) {
				t.Errorf("slave properties: %+v", b.Slave)
			}
			// Every site may become master: it serves mutual TLS with its
			// own certificate. Every site may follow a master it was not
			// configured to follow (bj after a switchover): it does so with
			// the secret, its certificate, the CA, compression and the cap.
			r := cfg.Replication
			cert := "/etc/metaq/tls/" + host + ".crt"
			if r.TLSCert != cert || r.TLSKey != "/etc/metaq/tls/"+host+".key" || r.TLSCA != "/etc/metaq/tls/ca.crt" || !r.ListenSet || r.SecretFile == "" {
				t.Errorf("%s cannot serve mutual TLS as master: [replication] %+v", host, r)
			}
			link := b.withSiteLink(config.Slave{SlaveID: 1})
			if link.TLSCert != cert || link.TLSCA != "/etc/metaq/tls/ca.crt" || link.Compression != "zstd" {
				t.Errorf("%s follows a new master without its link settings: %+v", host, link)
			}
			if b.Slave != nil && (b.Slave.TLSCert != cert || link.BandwidthBytesPerSec != b.Slave.BandwidthBytesPerSec) {
				t.Errorf("%s: its async_slave.properties and its [replication] name different certificates, or its cap is lost: %+v", host, b.Slave)
			}
		})
	}
}
