package wan

import (
	"log/slog"
	"time"
)

// Options describe the links; every pair of sites gets the same.
type Options struct {
	// Prefix is put before each site's name to name its namespace.
	Prefix string
	// Delay is the one-way delay added to every packet.
	Delay time.Duration
	// Loss is the fraction of packets dropped, 0..1.
	Loss float64
	// Rate caps each direction of each link, in tc's syntax ("50mbit");
	// "" or "0" leaves links uncapped.
	Rate string
	// MTU of the links; default 1500.
	MTU int
	// Logger receives setup and teardown steps; nil discards.
	Logger *slog.Logger
}
