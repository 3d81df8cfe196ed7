package configsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"metaq/broker/config"
)

// ServerURL returns the NATS URL a bundle or the configsync command uses for
// cfg: [nats] url when set, otherwise the embedded server's listen address
// ([nats] embeddedListen, default 127.0.0.1:<serverPort+4>).
func ServerURL(cfg *config.Server) string {
	if cfg.NATS.URL != "" {
		return cfg.NATS.URL
	}
	return "nats://" + EmbeddedListen(cfg)
}

// EmbeddedListen returns the address the embedded NATS server of cfg's bundle
// listens on: [nats] embeddedListen, default 127.0.0.1:<serverPort+4>.
func EmbeddedListen(cfg *config.Server) string {
	if cfg.NATS.EmbeddedListen != "" {
		return cfg.NATS.EmbeddedListen
	}
	port := cfg.System.ServerPort
	if port == 0 {
		port = 8123
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port+4))
}

// Connect opens a NATS connection to url with the credentials file and TLS
// files of n, routes the client's asynchronous errors and connection events
// to logger, and retries the first connection until ctx is done. The caller
// closes it with Drain.
func Connect(ctx context.Context, url string, n config.NATS, name string, logger *slog.Logger) (*nats.Conn, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			logger.Error("NATS: async error", "subject", subj, "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("NATS: disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			logger.Info("NATS: reconnected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { logger.Debug("NATS: connection closed") }),
	}
	if n.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	if n.TLSCert != "" || n.TLSKey != "" {
		if n.TLSCert == "" || n.TLSKey == "" {
			return nil, errors.New("configsync: [nats] tlsCert and tlsKey must be set together")
		}
		opts = append(opts, nats.ClientCert(n.TLSCert, n.TLSKey))
	}
	if n.TLSCA != "" {
		opts = append(opts, nats.RootCAs(n.TLSCA))
	}
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if !transientConnectError(err) {
			return nil, fmt.Errorf("configsync: connect %s: %w", url, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("configsync: connect %s: %w (%w)", url, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// openBucket binds to the configuration bucket, creating it when missing.
func openBucket(ctx context.Context, nc *nats.Conn, bucket string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("configsync: jetstream: %w", err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("configsync: bucket %s: %w", bucket, err)
	}
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "MetaQ server.ini versions and per-site apply state",
		History:     64, // the most JetStream allows; version.<N> keys keep the rest
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		// Created concurrently by another agent or pusher.
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("configsync: create bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// transientConnectError reports whether a first connection's failure may
// pass by itself, so Connect tries again: no server listens yet, or one
// answered slower than the handshake's bound (nats.go's 2 s, which a
// loaded host outlasts). Bad credentials or TLS files will not fix
// themselves.
func transientConnectError(err error) bool {
	if errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
