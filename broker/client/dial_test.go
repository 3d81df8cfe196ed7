package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
)

// TestConfigDialOpensBrokerConnections: Config.Dial opens the connections
// to brokers (a proxy or a fault injector in front of them): a producer
// whose static broker address leads nowhere by itself reaches the broker
// through the Dial given.
func TestConfigDialOpensBrokerConnections(t *testing.T) {
	br := newTestBroker(t, 0, "", "", 1<<30, map[string]int{"dial": 1})
	const alias = "broker-alias.invalid:8123"
	var dials atomic.Int64
	ctx := context.Background()
	c, err := New(ctx, Config{Brokers: []string{alias}, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != alias {
			t.Errorf("Dial called for %s, want %s", addr, alias)
		}
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, br.addr)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := NewProducer(c)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	if _, err := p.Send(ctx, &Message{Topic: "dial", Payload: []byte("through Dial")}); err != nil {
		t.Fatalf("send through Config.Dial: %v", err)
	}
	if dials.Load() == 0 {
		t.Fatal("Config.Dial was never called")
	}
}
