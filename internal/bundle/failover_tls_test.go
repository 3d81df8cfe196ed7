package bundle

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"metaq/internal/testutil"
)

// TestSwitchoverWithMutualTLSAndSecret runs the deploy/ link settings
// (shared secret, mutual TLS with one CA, zstd and a bandwidth cap) through
// `switchover -to hf` and back: bj, demoted, follows hf with its site's
// link settings ([replication] tlsCert/tlsKey/tlsCA as its client
// certificate, compression, cap), hf serves TLS as master with its own
// [replication] certificate, and gz follows hf over TLS. Each switchover
// reports every slave site following the new master.
func TestSwitchoverWithMutualTLSAndSecret(t *testing.T) {
	t.Parallel()
	zk := testutil.ZooKeeper(t)
	if zk == "" {
		t.Skip("METAQ_TEST_ZK not set")
	}
	root := t.TempDir()
	ca, caKey := testutil.WriteCert(t, root, "ca", true, nil, nil)
	for _, s := range []string{"bj", "hf", "gz"} {
		testutil.WriteCert(t, root, s, false, ca, caKey)
		if err := os.MkdirAll(filepath.Join(root, s), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, s, "repl.key"), []byte("the-deployment-replication-key-1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caFile := filepath.Join(root, "ca.pem")
	siteTLS := func(site string) string {
		return "\n[replication]\ntlsCert=" + filepath.Join(root, site+".pem") + "\ntlsKey=" + filepath.Join(root, site+".key") + "\ntlsCA=" + caFile + "\n"
	}
	slaveTLS := func(site string) string {
		return "compression=zstd\nbandwidthBytesPerSec=5000000\ntlsCert=" + filepath.Join(root, site+".pem") + "\ntlsKey=" + filepath.Join(root, site+".key") + "\ntlsCA=" + caFile + "\n"
	}
	zkRoot := multiSiteRoot(t, []string{zk})
	shared := failoverINIZK(zk, zkRoot, "secretFile=repl.key\ncompression=zstd\nbandwidthBytesPerSec=4000000\n", noConfigSync)
	bj := startSite(t, filepath.Join(root, "bj"), shared, siteSpec{name: "bj", noNATS: true, extraOverlay: siteTLS("bj")})
	join := []string{mustComp[*topologyComponent](t, bj).Topology().Addr()}
	hf := startSite(t, filepath.Join(root, "hf"), shared, siteSpec{name: "hf", slave: true, slaveID: 1, noNATS: true, join: join,
		extraOverlay: siteTLS("hf"), slaveExtra: slaveTLS("hf")})
	gz := startSite(t, filepath.Join(root, "gz"), shared, siteSpec{name: "gz", slave: true, slaveID: 2, noNATS: true, join: join,
		extraOverlay: siteTLS("gz"), slaveExtra: slaveTLS("gz")})
	produce(t, bj.Broker.Addr().String(), "orders", 50, "bj")
	waitCaughtUp(t, bj, hf, "orders", 20*time.Second)
	waitCaughtUp(t, bj, gz, "orders", 20*time.Second)

	code, body := testutil.HTTPDo(t, "POST", "http://"+bj.AdminAddr()+"/switchover?to=hf&followWait=20s", "")
	var rep SwitchoverReport
	if err := json.Unmarshal(body, &rep); code != http.StatusOK || err != nil {
		t.Fatalf("POST /switchover: %d %s (%v)", code, body, err)
	}
	t.Logf("switchover to hf: %s", body)
	following := map[string]bool{}
	for _, f := range rep.Followers {
		following[f.Site] = f.Following
		if !f.Following {
			t.Errorf("after the switchover to hf, %s does not follow it: %s", f.Site, f.Reason)
		}
	}
	if !following["bj"] || !following["gz"] || len(rep.Followers) != 2 {
		t.Fatalf("the switchover reports followers %+v, want bj and gz following", rep.Followers)
	}
	wantDemoted(t, bj, "meta-slave-group-hf/")
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if hf.Broker.WriteRefusal() != nil {
			return fmt.Errorf("hf refuses puts: %+v", hf.Broker.WriteRefusal())
		}
		return nil
	})
	produce(t, hf.Broker.Addr().String(), "orders", 30, "hf")
	wantFollowsByteIdentical(t, hf, bj, "orders")
	wantFollowsByteIdentical(t, hf, gz, "orders")
	sl := bj.SlaveConfig()
	if sl == nil || sl.TLSCert != filepath.Join(root, "bj.pem") || sl.TLSCA != caFile || sl.Compression != "zstd" || sl.BandwidthBytesPerSec != 4000000 {
		t.Fatalf("bj's slave link after the switchover: %+v", sl)
	}
}
