package bundle

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestDeployLayout loads deploy/common/server.ini with each site's overlay
// and slave properties as they are installed (/etc/metaq/{server.ini,
// site.ini,async_slave.properties}) and checks which components each site's
// bundle runs.
func TestDeployLayout(t *testing.T) {
	deploy := filepath.Join("..", "..", "..", "deploy")
	shared, err := os.ReadFile(filepath.Join(deploy, "common", "server.ini"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"bj": {compTxn, compShipper, compConfig, compDashboard, compTopology},
		"hf": {compTxn, compReceiver, compConfig, compDashboard, compTopology},
		"gz": {compTxn, compReceiver, compConfig, compDashboard, compTopology},
	}
	for site, comps := range want {
		t.Run(site, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "server.ini"), shared, 0o644)
			ov, err := os.ReadFile(filepath.Join(deploy, site, "site.ini"))
			if err != nil {
				t.Fatal(err)
			}
			// The placeholders an operator replaces.
			ovs := strings.ReplaceAll(string(ov), "REPLACE_WITH_BASE64_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
			os.WriteFile(filepath.Join(dir, "site.ini"), []byte(ovs), 0o644)
			opts := Options{ConfigPath: filepath.Join(dir, "server.ini")}
			if site != "bj" {
				props, err := os.ReadFile(filepath.Join(deploy, site, "async_slave.properties"))
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
			if cfg.Site.Name != site || cfg.System.BrokerID != 1 || cfg.System.HostName != "metaq-1."+site+".example.net" {
				t.Errorf("site %q broker %d host %q", cfg.Site.Name, cfg.System.BrokerID, cfg.System.HostName)
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
			if embedsNATS(b, readConfigKeys(cfg)) {
				t.Error("a deployed site must use its NATS cluster, not an embedded server")
			}
			if b.Slave != nil && (b.Slave.MasterAddress != "metaq-1.bj.example.net:8124" || b.Slave.AutoSyncMasterConfig) {
				t.Errorf("slave properties: %+v", b.Slave)
			}
		})
	}
}
