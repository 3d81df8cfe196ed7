package broker

import (
	"bytes"
	"testing"

	"metaq/broker/wire"
)

// `stats config` answers anyone who reaches the MetaQ port: the dashboard
// token and the gossip key must not be in it.
func TestStatsConfigLeavesSecretsOut(t *testing.T) {
	raw := append(bytes.Clone(vectorConfig(t).Raw),
		"\n[site]\nname=bj\ndashboardAddr=0.0.0.0:8120\ntoken=dashboard-s3cr3t\n[gossip]\nkey=Z29zc2lwLXMzY3IzdC1rZQ==\n"...)
	cfg := parseConfig(t, raw)
	if cfg.Site.Token != "dashboard-s3cr3t" {
		t.Fatalf("test config did not load its token: %+v", cfg.Site)
	}
	brk := startBroker(t, cfg, nil)
	cl := dial(t, brk.Addr())
	cl.sendCmd(&wire.Stats{Item: "config", HasItem: true, Opaque: 4})
	r := cl.result()
	if r.Code != 200 {
		t.Fatalf("stats config: %s", r)
	}
	for _, secret := range []string{"dashboard-s3cr3t", "Z29zc2lwLXMzY3IzdC1rZQ=="} {
		if bytes.Contains(r.Body, []byte(secret)) {
			t.Fatalf("stats config returned the secret %q:\n%s", secret, r.Body)
		}
		if bytes.Contains([]byte(brk.Stats("config")), []byte(secret)) {
			t.Fatalf("Stats(config) returned the secret %q", secret)
		}
	}
	if !bytes.Contains(r.Body, []byte("dashboardAddr=0.0.0.0:8120")) || !bytes.Contains(r.Body, []byte("[system]")) {
		t.Fatalf("stats config lost more than the secrets:\n%s", r.Body)
	}
}
