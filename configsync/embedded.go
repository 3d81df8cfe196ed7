package configsync

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"metaq/broker/config"
)

// EmbeddedOptions configures the NATS server a single-machine bundle runs
// when no NATS URL is configured.
type EmbeddedOptions struct {
	// Listen is host:port for clients. Default 127.0.0.1:<serverPort+4> via
	// EmbeddedOptionsFor; port -1 picks a free port (tests).
	Listen string
	// StoreDir holds JetStream's files. Required.
	StoreDir string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines. Nil discards them.
	Logger *slog.Logger
}

// EmbeddedOptionsFor returns the embedded server options for a bundle's
// configuration: listen on [nats] embeddedListen (default
// 127.0.0.1:<serverPort+4>) and store under <dataPath>/configsync-nats.
func EmbeddedOptionsFor(cfg *config.Server, logger *slog.Logger) EmbeddedOptions {
	return EmbeddedOptions{
		Listen:   EmbeddedListen(cfg),
		StoreDir: filepath.Join(cfg.System.DataPath, "configsync-nats"),
		Logger:   logger,
	}
}

// EmbeddedNATS is a running in-process NATS server with JetStream.
type EmbeddedNATS struct {
	srv *server.Server
}

// StartEmbeddedNATS starts a NATS server with JetStream in this process and
// waits until it accepts connections. Close stops it.
func StartEmbeddedNATS(o EmbeddedOptions) (*EmbeddedNATS, error) {
	if o.StoreDir == "" {
		return nil, errors.New("configsync: embedded NATS: StoreDir is required")
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:8127"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	host, portText, err := net.SplitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("configsync: embedded NATS listen %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("configsync: embedded NATS listen %q: bad port: %w", o.Listen, err)
	}
	if port == 0 {
		// Port 0 means "any free port" in our configuration (serverPort=0
		// derives 0 for every listener); nats-server reads 0 as its default
		// 4222 and -1 as a random port.
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName: "metaq-configsync",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		// No HTTP monitoring, no cluster, no leafnodes: clients only.
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configsync: embedded NATS: %w", err)
	}
	if o.Logger != nil {
		srv.SetLoggerV2(slogNATS{o.Logger.With("component", "nats-server")}, false, false, false)
	}
	go srv.Start() // Start returns once listeners run; ReadyForConnections waits for them.
	if !srv.ReadyForConnections(o.ReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("configsync: embedded NATS on %s not ready within %v", o.Listen, o.ReadyTimeout)
	}
	return &EmbeddedNATS{srv: srv}, nil
}

// ClientURL is the URL clients connect to (nats://host:port).
func (e *EmbeddedNATS) ClientURL() string { return e.srv.ClientURL() }

// Server returns the underlying server, for tests and monitoring.
func (e *EmbeddedNATS) Server() *server.Server { return e.srv }

// Close shuts the server down and waits for it. It is safe to call twice.
func (e *EmbeddedNATS) Close() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// slogNATS routes nats-server's logger into slog.
type slogNATS struct{ l *slog.Logger }

func (s slogNATS) Noticef(f string, v ...any) { s.l.Info(fmt.Sprintf(f, v...)) }
func (s slogNATS) Warnf(f string, v ...any)   { s.l.Warn(fmt.Sprintf(f, v...)) }
func (s slogNATS) Fatalf(f string, v ...any)  { s.l.Error(fmt.Sprintf(f, v...), "fatal", true) }
func (s slogNATS) Errorf(f string, v ...any)  { s.l.Error(fmt.Sprintf(f, v...)) }
func (s slogNATS) Debugf(f string, v ...any)  { s.l.Debug(fmt.Sprintf(f, v...)) }
func (s slogNATS) Tracef(f string, v ...any)  { s.l.Debug(fmt.Sprintf(f, v...), "trace", true) }
