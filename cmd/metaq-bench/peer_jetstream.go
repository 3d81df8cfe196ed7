package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startJetStream starts a NATS server with JetStream in this process (as our
// broker runs in process), file storage on a fresh temporary directory and
// the server's default sync interval (an fsync every 2 minutes, so an
// acknowledged publish is not yet on disk). Each partition of o is one
// stream with a file store, bench-p<N> on subject <topic>.p<N>.
//
// Producers publish with nats.go's asynchronous JetStream publish, each
// connection keeping o.inflight publishes waiting for their ack; latency
// is publish-to-ack. Consumers use one durable pull consumer per stream
// (no acks, deliver all, like our consumers which read from offset 0 and
// commit nothing), streams shared out among them as partitions are.
func startJetStream(o options) (target, error) {
	dir, err := os.MkdirTemp("", "metaq-bench-jetstream-")
	if err != nil {
		return target{}, err
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "metaq-bench-peer",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   dir,
		NoSigs:     true,
		NoLog:      true,
		// Large enough that a 10 s run at full speed never hits a limit.
		JetStreamMaxStore: 64 << 30,
		MaxPayload:        int32(max(o.size+1024, 1<<20)),
	})
	if err != nil {
		os.RemoveAll(dir)
		return target{}, fmt.Errorf("jetstream: %w", err)
	}
	go srv.Start()
	stopServer := func() {
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
	if !srv.ReadyForConnections(10 * time.Second) {
		stopServer()
		return target{}, errors.New("jetstream: embedded server not ready within 10s")
	}
	url := srv.ClientURL()
	if err := setupJetStream(url, o); err != nil {
		stopServer()
		return target{}, err
	}
	return target{
		name:    "jetstream",
		addr:    strings.TrimPrefix(url, "nats://"),
		produce: func(ctx context.Context, n int, st *stats) error { return jsProduce(ctx, o, url, n, st) },
		consume: func(ctx context.Context, n int, st *stats) error { return jsConsume(ctx, o, url, n, st) },
		close:   stopServer,
	}, nil
}

func jsStream(o options, p int) (name, subject string) {
	return fmt.Sprintf("%s-p%d", o.topic, p), fmt.Sprintf("%s.p%d", o.topic, p)
}

// setupJetStream creates the streams and, with consumers, their durable
// pull consumers.
func setupJetStream(url string, o options) error {
	nc, err := nats.Connect(url)
	if err != nil {
		return fmt.Errorf("jetstream: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for p := range max(o.partitions, 1) {
		name, subj := jsStream(o, p)
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: name, Subjects: []string{subj}, Storage: jetstream.FileStorage, Replicas: 1,
		}); err != nil {
			return fmt.Errorf("jetstream: create stream %s: %w", name, err)
		}
		if o.consumers > 0 {
			if _, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{
				Durable: "bench", AckPolicy: jetstream.AckNonePolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
			}); err != nil {
				return fmt.Errorf("jetstream: create consumer on %s: %w", name, err)
			}
		}
	}
	return nil
}

// jsProduce runs one producer connection: o.inflight async publishes
// outstanding, partitions (streams) round robin per message as our
// producers do.
func jsProduce(ctx context.Context, o options, url string, n int, st *stats) error {
	sent := newSendTimes[*nats.Msg](o.inflight)
	slots := make(chan struct{}, o.inflight)
	pubErr := make(chan error, 1)
	done := func(m *nats.Msg, ok bool) {
		if t, found := sent.take(m); found {
			st.observePut(time.Since(t), ok)
			<-slots
		}
	}
	nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("bench-producer-%d", n)))
	if err != nil {
		return fmt.Errorf("jetstream: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc,
		// The slots above bound what is outstanding; the library's own
		// limit only has to stay out of the way.
		jetstream.WithPublishAsyncMaxPending(o.inflight*2+16),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { done(m, true) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			done(m, false)
			select {
			case pubErr <- err:
			default:
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	parts := max(o.partitions, 1)
	subjects := make([]string, parts)
	for p := range parts {
		_, subjects[p] = jsStream(o, p)
	}
	body := []byte(strings.Repeat("m", o.size))
	part := n % parts
	for {
		select {
		case slots <- struct{}{}:
		case err := <-pubErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("jetstream: publish: %w", err)
		case <-ctx.Done():
			return nil
		}
		part = (part + 1) % parts
		m := &nats.Msg{Subject: subjects[part], Data: body}
		sent.put(m, time.Now())
		if _, err := js.PublishMsgAsync(m); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("jetstream: publish: %w", err)
		}
	}
}

// jsConsume runs one consumer connection pulling the streams assigned to it
// (stream p goes to consumer p mod M, or every consumer reads every stream
// when there are more consumers than streams, as in consume).
func jsConsume(ctx context.Context, o options, url string, n int, st *stats) error {
	nc, err := nats.Connect(url, nats.Name(fmt.Sprintf("bench-consumer-%d", n)))
	if err != nil {
		return fmt.Errorf("jetstream: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	parts := max(o.partitions, 1)
	for p := range parts {
		if !(o.consumers > parts || p%o.consumers == n) {
			continue
		}
		name, _ := jsStream(o, p)
		c, err := js.Consumer(ctx, name, "bench")
		if err != nil {
			return fmt.Errorf("jetstream: consumer on %s: %w", name, err)
		}
		cc, err := c.Consume(func(m jetstream.Msg) {
			st.observeConsume(int64(len(m.Data())))
		}, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			// Most consume errors (a missed heartbeat, a pull timing out)
			// are recovered by the library; report them and go on.
			if ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "jetstream consumer %d: %v\n", n, err)
			}
		}))
		if err != nil {
			return fmt.Errorf("jetstream: consume %s: %w", name, err)
		}
		defer cc.Stop()
	}
	<-ctx.Done()
	return nil
}
