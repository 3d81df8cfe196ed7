package bundle

import (
	"metaq/broker/config"
)

// A site that follows a master it was not configured to follow (a master
// demoted at run time, or restarted after its data directory recorded the
// demotion) has no async_slave.properties of its own: its slave link takes
// the settings of the site's replication link instead, so that it still
// proves the shared secret (secretFile, read from server.ini by every
// receiver), presents its client certificate, compresses and keeps to the
// bandwidth cap. [replication] tlsCert and tlsKey are then the client
// certificate (issue it for both server and client use: one certificate
// serves the site as master and as slave), tlsCA the CA the new master's
// certificate is checked against (one CA signs every site's certificate).
// A site started as a slave keeps what its async_slave.properties says,
// also when it follows a new master.

// withSiteLink fills the link settings sl lacks from the slave
// configuration the bundle started with (when it was started as a slave),
// else from [replication]; it returns the filled copy.
func (b *Bundle) withSiteLink(sl config.Slave) *config.Slave {
	from := config.Slave{}
	if b.Slave != nil && !b.formerMaster {
		from = *b.Slave
	}
	r := b.Config().Replication
	if from.TLSCert == "" && from.TLSKey == "" && from.TLSCA == "" {
		from.TLSCert, from.TLSKey, from.TLSCA = r.TLSCert, r.TLSKey, r.TLSCA
	}
	if from.Compression == "" {
		from.Compression = r.Compression
	}
	if from.BandwidthBytesPerSec == 0 {
		from.BandwidthBytesPerSec = r.BandwidthBytesPerSec
	}
	if sl.TLSCert == "" && sl.TLSKey == "" && sl.TLSCA == "" {
		sl.TLSCert, sl.TLSKey, sl.TLSCA = from.TLSCert, from.TLSKey, from.TLSCA
	}
	if sl.Compression == "" {
		sl.Compression = from.Compression
	}
	if sl.BandwidthBytesPerSec == 0 {
		sl.BandwidthBytesPerSec = from.BandwidthBytesPerSec
	}
	return &sl
}
