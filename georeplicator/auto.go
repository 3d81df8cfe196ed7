package georeplicator

import "time"

// The auto rule. zstd (SpeedFastest) compresses log-like data about 40%
// better than s2 but runs at roughly 250 MB/s on one core, so it wins
// whenever the link, not the CPU, is the bottleneck - any WAN link. s2 wins
// when the link is faster than zstd can compress: a LAN. So, per frame:
//
//  1. Smoothed RTT (from keepalive echoes) below autoLANRTT (ShipperOptions.AutoLANRTT), and no
//     bandwidth cap or a cap of at least autoFastLink: s2.
//  2. A bandwidth cap of at least autoFastLink bytes/s: s2.
//  3. Otherwise (including before the first RTT sample): zstd.
//  4. If the last autoWindow frames shrank by less than 10% (random or
//     already-compressed payloads), send uncompressed for autoBackoff frames,
//     then try again.
//
// Fixed modes (zstd, s2, none) skip all this, except that a frame that would
// grow is always sent uncompressed.
const (
	autoLANRTT   = 2 * time.Millisecond
	autoFastLink = 200 << 20
	autoWindow   = 16
	autoBackoff  = 64
)

type codecChooser struct {
	mode       Mode
	bw         int64
	lanRTT     time.Duration
	frames     int
	noneUntil  int
	raw, wire  int
	windowSeen int
}

func (c *codecChooser) init(m Mode, bw int64) { c.mode, c.bw, c.lanRTT = m, bw, autoLANRTT }

// pick returns the codec for the next frame.
func (c *codecChooser) pick(rtt time.Duration) Codec {
	switch c.mode {
	case ModeS2:
		return CodecS2
	case ModeNone:
		return CodecNone
	case ModeZstd, "":
		return CodecZstd
	}
	c.frames++
	if c.frames < c.noneUntil {
		return CodecNone
	}
	fast := c.bw == 0 || c.bw >= autoFastLink
	if rtt > 0 && rtt < c.lanRTT && fast {
		return CodecS2
	}
	if c.bw >= autoFastLink {
		return CodecS2
	}
	return CodecZstd
}

// observe records a compressed frame's sizes (auto mode only).
func (c *codecChooser) observe(codec Codec, raw, wire int) {
	if c.mode != ModeAuto || c.frames < c.noneUntil {
		return
	}
	c.raw += raw
	c.wire += wire
	c.windowSeen++
	if c.windowSeen < autoWindow {
		return
	}
	if c.wire*10 > c.raw*9 {
		c.noneUntil = c.frames + autoBackoff
	}
	c.raw, c.wire, c.windowSeen = 0, 0, 0
}
