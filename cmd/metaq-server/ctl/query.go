package ctl

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
)

// listGroups is Query without a group: every group with stored offsets,
// its topics and its total lag, or a sentence saying there is none.
func listGroups(ctx context.Context, r *registry.Registry, topic string, w io.Writer) error {
	groups, err := r.Groups(ctx)
	if err != nil {
		return err
	}
	where := r.Connect() + r.Paths().Consumers()
	if len(groups) == 0 {
		fmt.Fprintf(w, "no consumer group has stored offsets in %s\n", where)
		return nil
	}
	fmt.Fprintf(w, "consumer groups in %s (metaq-server query -group G shows one group's partitions):\n", where)
	maxOffsets := map[int]map[string]int64{}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPICS\tPARTITIONS\tLAG")
	for _, g := range groups {
		offs, err := r.ConsumerOffsets(ctx, g, topic)
		if err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t%v\n", g, err)
			continue
		}
		if len(offs) == 0 {
			continue // -topic given: not this group's
		}
		topics := map[string]bool{}
		var lag int64
		lagKnown := true
		for _, o := range offs {
			topics[o.Topic] = true
			m, ok := maxOffsets[o.BrokerID]
			if !ok {
				m = brokerMaxOffsets(ctx, r, o.BrokerID)
				maxOffsets[o.BrokerID] = m
			}
			if max, ok := m[o.Topic+"-"+strconv.Itoa(o.Part)]; ok {
				lag += max - o.Offset
			} else {
				lagKnown = false
			}
		}
		names := make([]string, 0, len(topics))
		for t := range topics {
			names = append(names, t)
		}
		sort.Strings(names)
		lagCol := strconv.FormatInt(lag, 10)
		if !lagKnown {
			lagCol += " (some brokers did not answer)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", g, strings.Join(names, ","), len(offs), lagCol)
	}
	return tw.Flush()
}

// Query prints a consumer group's saved offsets from ZooKeeper (all its
// topics, or one), or the list of groups when group is "". For each
// partition it also asks the partition's master (found in ZooKeeper) for its
// max offset with `stats offsets`, and prints the lag; a broker that does not
// answer leaves those columns as "-".
func Query(ctx context.Context, cfg *config.Server, group, topic string, w io.Writer) error {
	if !cfg.ZooKeeper.Enable {
		// Not a 30 s wait for a ZooKeeper at the default address.
		return fmt.Errorf("ctl: query reads the consumers' offsets from ZooKeeper, and %s turns it off ([zookeeper] zk.zkEnable=false)", cfg.File)
	}
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
		return listGroups(ctx, r, topic, w)
	}
	offs, err := r.ConsumerOffsets(ctx, group, topic)
	if err != nil {
		return err
	}
	if len(offs) == 0 {
		return fmt.Errorf("ctl: no offsets stored for group %q under %s", group, r.Paths().Consumers())
	}
	maxOffsets := map[int]map[string]int64{} // broker id -> "topic-p" -> max
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tOFFSET\tMAX_OFFSET\tLAG\tLAST_MSG_ID")
	for _, o := range offs {
		m, ok := maxOffsets[o.BrokerID]
		if !ok {
			m = brokerMaxOffsets(ctx, r, o.BrokerID)
			maxOffsets[o.BrokerID] = m
		}
		maxCol, lagCol := "-", "-"
		if max, ok := m[o.Topic+"-"+strconv.Itoa(o.Part)]; ok {
			maxCol, lagCol = strconv.FormatInt(max, 10), strconv.FormatInt(max-o.Offset, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", o.Topic, o.Partition, o.Offset, maxCol, lagCol, o.MsgID)
	}
	return tw.Flush()
}

// brokerMaxOffsets asks broker id's master for `stats offsets` and returns
// max_offset by "topic-partition"; nil when it cannot be reached.
func brokerMaxOffsets(ctx context.Context, r *registry.Registry, id int) map[string]int64 {
	url, _, err := r.Get(ctx, r.Paths().Broker(id, -1))
	if err != nil {
		return nil
	}
	body, err := Stats(ctx, strings.TrimPrefix(string(url), "meta://"), "offsets", 5*time.Second)
	if err != nil {
		return nil
	}
	return parseOffsetStats(body)
}

// parseOffsetStats reads `stats offsets` lines:
// <topic> part <partition> min_offset <n> max_offset <n>.
func parseOffsetStats(body string) map[string]int64 {
	out := map[string]int64{}
	for _, line := range strings.Split(body, "\r\n") {
		f := strings.Fields(line)
		if len(f) != 7 || f[1] != "part" || f[5] != "max_offset" {
			continue
		}
		max, err := strconv.ParseInt(f[6], 10, 64)
		if err != nil {
			continue
		}
		out[f[0]+"-"+f[2]] = max
	}
	return out
}
