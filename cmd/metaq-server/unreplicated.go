package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"metaq/broker/client"
	"metaq/broker/config"
	"metaq/broker/store"
	"metaq/georeplicator"
)

// unreplicatedDir is where a former master's receiver saves the records it
// cut (ReceiverOptions.TailDir as the bundle sets it).
func unreplicatedDir(cfg *config.Server) string {
	return filepath.Join(cfg.System.DataPath, "replication", "unreplicated")
}

// listUnreplicated prints the saved tails, one per line.
func listUnreplicated(w io.Writer, dir string) ([]georeplicator.TailFile, error) {
	tails, err := georeplicator.ListTails(dir)
	if err != nil {
		return nil, err
	}
	if len(tails) == 0 {
		fmt.Fprintf(w, "no unreplicated records in %s\n", dir)
		return nil, nil
	}
	// The file's generation is the one that superseded the records (its
	// master did not have them), not the one they were written in: a
	// master of an earlier generation wrote them. The column says so.
	fmt.Fprintf(w, "%-40s %12s %12s %10s %8s  %s\n", "PARTITION", "FROM", "TO", "CUT AT GEN", "RECORDS", "FILE")
	for _, t := range tails {
		fmt.Fprintf(w, "%-40s %12d %12d %10d %8d  %s\n", fmt.Sprintf("%s-%d", t.Topic, t.Partition), t.From, t.To, t.Generation, t.Records, t.Path)
	}
	fmt.Fprintln(w, "CUT AT GEN: the generation whose master did not have these records; a master of an earlier generation wrote them.")
	return tails, nil
}

// tailMessages decodes a saved tail's records into messages to publish again
// (a record whose flag has bit 0 set starts its body with a length-prefixed
// attribute, as MetaQ stores it).
func tailMessages(topic string, data []byte) ([]*client.Message, error) {
	var out []*client.Message
	for len(data) > 0 {
		r, n, err := store.DecodeRecord(data)
		if err != nil {
			return nil, err
		}
		body := r.Body
		m := &client.Message{Topic: topic}
		if r.Flag&1 != 0 {
			if len(body) < 4 {
				return nil, errors.New("record too short for its attribute")
			}
			al := int(int32(uint32(body[0])<<24 | uint32(body[1])<<16 | uint32(body[2])<<8 | uint32(body[3])))
			if al < 0 || 4+al > len(body) {
				return nil, fmt.Errorf("attribute length %d beyond the record", al)
			}
			m.HasAttribute, m.Attribute = true, string(body[4:4+al])
			body = body[4+al:]
		}
		m.Payload = append([]byte(nil), body...)
		out = append(out, m)
		data = data[n:]
	}
	return out, nil
}

// publishUnreplicated sends every saved tail's messages to the topic's
// current master (found in ZooKeeper, or at brokers) as new messages, and
// renames each file to .published once all of its messages were
// acknowledged, so that running it again does not publish them twice.
func publishUnreplicated(ctx context.Context, w io.Writer, cfg *config.Server, brokers string) error {
	tails, err := listUnreplicated(w, unreplicatedDir(cfg))
	if err != nil || len(tails) == 0 {
		return err
	}
	cc := client.Config{}
	switch {
	case brokers != "":
		cc.Brokers = strings.Split(brokers, ",")
	case cfg.ZooKeeper.Enable:
		cc.ZKServers, cc.ZKRoot = strings.Split(cfg.ZooKeeper.Connect, ","), cfg.ZooKeeper.Root
	default:
		return errors.New("ZooKeeper is off: name the master with -brokers host:port")
	}
	c, err := client.New(ctx, cc)
	if err != nil {
		return err
	}
	defer c.Close()
	p, err := client.NewProducer(c)
	if err != nil {
		return err
	}
	defer p.Close(context.Background())
	for _, t := range tails {
		data, err := os.ReadFile(t.Path)
		if err != nil {
			return err
		}
		msgs, err := tailMessages(t.Topic, data)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Path, err)
		}
		for i, m := range msgs {
			if _, err := p.Send(ctx, m); err != nil {
				return fmt.Errorf("%s: message %d of %d: %w (the file is kept; messages before it were sent)", t.Path, i+1, len(msgs), err)
			}
		}
		if err := os.Rename(t.Path, t.Path+".published"); err != nil {
			return err
		}
		fmt.Fprintf(w, "published %d messages of %s-%d from %s\n", len(msgs), t.Topic, t.Partition, t.Path)
	}
	return nil
}
