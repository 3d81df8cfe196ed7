package ctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"metaq/broker/config"
	"metaq/broker/registry"
)

// Query prints a consumer group's saved offsets from ZooKeeper (all its
// topics, or one), or the list of groups when group is "".
func Query(ctx context.Context, cfg *config.Server, group, topic string, w io.Writer) error {
	r, err := registry.New(ctx, registry.Options{
		Connect:           cfg.ZooKeeper.Connect,
		Root:              cfg.ZooKeeper.Root,
		SessionTimeout:    cfg.ZooKeeper.SessionTimeout,
		ConnectionTimeout: cfg.ZooKeeper.ConnectionTimeout,
	})
	if err != nil {
		return err
	}
	defer r.Close()
	if group == "" {
		groups, err := r.Groups(ctx)
		if err != nil {
			return err
		}
		for _, g := range groups {
			fmt.Fprintln(w, g)
		}
		return nil
	}
	offs, err := r.ConsumerOffsets(ctx, group, topic)
	if err != nil {
		return err
	}
	if len(offs) == 0 {
		return fmt.Errorf("ctl: no offsets stored for group %q under %s", group, r.Paths().Consumers())
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET\tLAST_MSG_ID")
	for _, o := range offs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", o.Topic, o.Partition, o.Offset, o.MsgID)
	}
	return tw.Flush()
}
