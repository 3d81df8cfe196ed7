package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"metaq/broker/config"
)

// pushKey signs the demo's configsync push; every demo site trusts its
// public key ([nats] trustedKeys in site.ini), as a real deployment trusts
// the key `configsync keygen` made for its operators.
var pushKey = func() ed25519.PrivateKey {
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return k
}()

func pushPublicKey() string { return config.FormatPublicKey(pushKey.Public().(ed25519.PublicKey)) }

// replicationKey is the demo's replication shared secret ([replication]
// secretFile=replication.key in every site.ini): bj accepts only slaves that
// prove they hold it.
var replicationKey = func() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}()

// writeReplicationKey writes the key file next to a site's server.ini,
// readable by its owner only (the bundle refuses a looser file).
func writeReplicationKey(conf string) error {
	if err := os.WriteFile(filepath.Join(conf, "replication.key"), []byte(replicationKey+"\n"), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}
