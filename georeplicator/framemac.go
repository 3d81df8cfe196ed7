package georeplicator

// Authentication of every frame after a shared-secret handshake.
//
// The handshake (auth.go) proves that both peers hold the secret, but a
// relay on the path that passed it through could then insert, replay or
// reorder frames of its own (a switchover request, an ack). So once the
// handshake has succeeded with a secret, every frame in both directions
// carries a MAC trailer:
//
//	+---------------------+-----------------+---------------------------+
//	| header (32 bytes)   | payload         | HMAC-SHA256 (32 bytes)    |
//	+---------------------+-----------------+---------------------------+
//
// MAC = HMAC-SHA256(direction key, frame number | header | payload), where
// the frame number counts the frames sent in that direction since the
// handshake (from 0, not sent: both ends count) and the direction keys are
// derived from the secret and the handshake's two fresh nonces and hello:
// a frame from another connection, a replayed or reordered frame, a frame
// sent back the other way, or an inserted one fails its MAC, and the link
// is dropped (ErrAuth) before the frame is acted on. The header's CRCs
// still catch damage on links without a secret.
//
// Peers state the format in the handshake: the slave's hello sets
// featureFrameMAC, and a master that will authenticate frames proves the
// secret under masterLabelFrames instead of masterLabel. A master refuses
// a slave with a secret that does not set the bit, and a slave refuses a
// master whose proof is the older one, each naming the older version.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// macLen is the length of a frame's MAC trailer.
const macLen = sha256.Size

const (
	// masterLabelFrames is the master's proof label when every frame that
	// follows the handshake carries a MAC.
	masterLabelFrames = "metaq-replication master v2 frame-mac"
	// Labels of the two direction keys.
	keyLabelToSlave  = "metaq-replication frames master->slave v1"
	keyLabelToMaster = "metaq-replication frames slave->master v1"
)

// frameMAC authenticates the frames of one direction of a link. It is not
// safe for concurrent use: the writer side is used under the link's write
// lock (so frame numbers follow the order on the wire), the reader side by
// the one reading goroutine.
type frameMAC struct {
	h   hash.Hash
	n   uint64 // frames of this direction so far
	sum [macLen]byte
}

func newFrameMAC(key []byte) *frameMAC { return &frameMAC{h: hmac.New(sha256.New, key)} }

// next returns the MAC of the next frame of this direction (valid until the
// following call) and counts the frame.
func (m *frameMAC) next(hdr, payload []byte) []byte {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], m.n)
	m.n++
	m.h.Reset()
	m.h.Write(n[:])
	m.h.Write(hdr)
	m.h.Write(payload)
	return m.h.Sum(m.sum[:0])
}

// linkMACs are the two directions of an authenticated link, as one end
// sees them; nil fields mean frames without a MAC (no secret).
type linkMACs struct {
	send, recv *frameMAC
}

// masterLinkMACs and slaveLinkMACs derive the keys of a link whose
// handshake used secret, the master's nonce mn, the slave's sn and hello.
func masterLinkMACs(secret, mn, sn, hello []byte) linkMACs {
	return linkMACs{
		send: newFrameMAC(authMAC(secret, keyLabelToSlave, mn, sn, hello)),
		recv: newFrameMAC(authMAC(secret, keyLabelToMaster, mn, sn, hello)),
	}
}

func slaveLinkMACs(secret, mn, sn, hello []byte) linkMACs {
	m := masterLinkMACs(secret, mn, sn, hello)
	return linkMACs{send: m.recv, recv: m.send}
}
