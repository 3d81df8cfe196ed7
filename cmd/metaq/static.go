package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"metaq/broker/client"
	"metaq/broker/config"
)

// boundPartition is a partition as the operator names it (Shown: the
// broker's real id) together with the client and partition to read it
// through. With ZooKeeper both are the same; with -brokers each broker gets
// a client of its own, in which it is broker 0.
type boundPartition struct {
	Shown client.Partition
	C     *client.Client
	P     client.Partition
	Addr  string
}

// staticBroker is one -brokers address with the id it reports in `stats`.
type staticBroker struct {
	id   int
	addr string
	c    *client.Client
}

// staticBrokers asks every -brokers address for its brokerId (the id in
// message ids and in brokerId-partition names) and opens a client on each.
func (g *globals) staticBrokers(ctx context.Context) ([]staticBroker, func(), error) {
	var out []staticBroker
	closeAll := func() {
		for _, b := range out {
			b.c.Close()
		}
	}
	for _, addr := range strings.Split(g.brokers, ",") {
		addr = strings.TrimSpace(addr)
		if addr == "" {
			continue
		}
		body, err := brokerStats(ctx, addr, "")
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		id, ok := statValue(body, "broker_id")
		if !ok {
			closeAll()
			return nil, nil, fmt.Errorf("%s: stats answer has no broker_id", addr)
		}
		c, err := client.New(ctx, client.Config{Brokers: []string{addr}})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out = append(out, staticBroker{id: id, addr: addr, c: c})
	}
	return out, closeAll, nil
}

// partitionsOf lists topic's partitions. Without ZooKeeper it asks each
// broker how many partitions it has for the topic (`stats <topic>`), since
// static brokers have no registrations to read.
func (g *globals) partitionsOf(ctx context.Context, c *client.Client, topic string) ([]boundPartition, func(), error) {
	if g.brokers == "" {
		parts, err := c.Partitions(ctx, topic)
		if err != nil {
			return nil, nil, err
		}
		out := make([]boundPartition, len(parts))
		for i, p := range parts {
			out[i] = boundPartition{Shown: p, C: c, P: p}
		}
		return out, func() {}, nil
	}
	brokers, closeAll, err := g.staticBrokers(ctx)
	if err != nil {
		return nil, nil, err
	}
	var out []boundPartition
	for _, b := range brokers {
		n, err := topicPartitions(ctx, b.addr, topic)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		for i := range n {
			out = append(out, boundPartition{Shown: client.Partition{BrokerID: b.id, Partition: i}, C: b.c,
				P: client.Partition{BrokerID: 0, Partition: i}, Addr: b.addr})
		}
	}
	return out, closeAll, nil
}

// bindPartition resolves one brokerId-partition name: with -brokers, to the
// broker that reports that id.
func (g *globals) bindPartition(ctx context.Context, c *client.Client, p client.Partition) (boundPartition, func(), error) {
	if g.brokers == "" {
		return boundPartition{Shown: p, C: c, P: p}, func() {}, nil
	}
	brokers, closeAll, err := g.staticBrokers(ctx)
	if err != nil {
		return boundPartition{}, nil, err
	}
	var ids []string
	for _, b := range brokers {
		if b.id == p.BrokerID {
			return boundPartition{Shown: p, C: b.c, P: client.Partition{BrokerID: 0, Partition: p.Partition}, Addr: b.addr}, closeAll, nil
		}
		ids = append(ids, strconv.Itoa(b.id)+"="+b.addr)
	}
	closeAll()
	return boundPartition{}, nil, fmt.Errorf("no broker with id %d among -brokers (%s)", p.BrokerID, strings.Join(ids, ", "))
}

// topicPartitions is how many partitions the broker at addr has for topic:
// from the server.ini it runs (`stats config`), which covers topics that hold
// no message yet, else from `stats <topic>`. 0 when it does not serve it.
func topicPartitions(ctx context.Context, addr, topic string) (int, error) {
	if raw, err := brokerStats(ctx, addr, "config"); err == nil {
		if cfg, _, err := config.Parse("server.ini", []byte(raw)); err == nil {
			tc, ok := cfg.TopicFor(topic)
			if !ok {
				return 0, nil
			}
			return tc.NumPartitions, nil
		}
	}
	body, err := brokerStats(ctx, addr, topic)
	if err != nil {
		return 0, err
	}
	if code, _ := statValue(body, "resultCode"); code != 0 {
		return 0, nil
	}
	n, _ := statValue(body, "partitions")
	return n, nil
}

// brokerStats sends MetaQ's `stats [item]` to addr and returns the body.
func brokerStats(ctx context.Context, addr, item string) (string, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", fmt.Errorf("stats %s: %w", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line := "stats\r\n"
	if item != "" {
		line = "stats " + item + " 1\r\n"
	}
	if _, err := io.WriteString(conn, line); err != nil {
		return "", fmt.Errorf("stats %s: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("stats %s: %w", addr, err)
	}
	f := strings.Fields(head)
	if len(f) < 3 || f[0] != "result" {
		return "", fmt.Errorf("stats %s: unexpected answer %q", addr, head)
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 0 || n > 16<<20 {
		return "", fmt.Errorf("stats %s: unexpected answer %q", addr, head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("stats %s: %w", addr, err)
	}
	if f[1] != "200" {
		return "", fmt.Errorf("stats %s: %s %s", addr, f[1], body)
	}
	return string(body), nil
}

// statValue finds "name value" in a stats body.
func statValue(body, name string) (int, bool) {
	for line := range strings.SplitSeq(body, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == name {
			n, err := strconv.Atoi(f[1])
			return n, err == nil
		}
	}
	return 0, false
}
