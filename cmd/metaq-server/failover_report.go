package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"metaq/cmd/metaq-server/ctl"
	"metaq/internal/bundle"
)

// reportCall runs an admin call that answers with a JSON report and prints
// it for an operator with show (the JSON as is with -json).
func reportCall(ctx context.Context, c *common, path string, q url.Values, show func(io.Writer, []byte) error) error {
	cfg, err := c.load()
	if err != nil {
		return err
	}
	// The client waits as long as the server may (promote -wait, the
	// finisher's and the followers' waits), not a fixed minute.
	body, err := ctl.NewAdmin(cfg).DoWithin(ctx, bundle.AdminCallBound(cfg, "POST", path, q), "POST", path, q)
	if err != nil {
		return err // it carries the endpoint's answer
	}
	if c.json {
		_, err = io.WriteString(os.Stdout, body)
		return err
	}
	return show(os.Stdout, []byte(body))
}

// printSwitchover renders a SwitchoverReport (the admin endpoint's JSON).
func printSwitchover(w io.Writer, body []byte) error {
	var rep bundle.SwitchoverReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("switchover: the report %q: %w", body, err)
	}
	who := newMasterName(rep)
	fmt.Fprintf(w, "switchover: %s is the new master of broker %d (generation %d)\n", who, rep.BrokerID, rep.Generation)
	fmt.Fprintf(w, "write downtime at the old master: %s (it stored no puts; those that reached it were held and passed on to the new master, or answered 503, retriable, past [replication] handoverHoldMs)\n", round(rep.WritesStopped))
	fmt.Fprintf(w, "the new master held the old master's whole durable log (log end %d): no acknowledged message is lost\n", rep.DurableEnd)
	switch {
	case rep.Via != "":
		fmt.Fprintf(w, "asked at this slave site; carried out by the master at %s, which now becomes a slave of %s\n", rep.Via, who)
	case rep.Following:
		fmt.Fprintf(w, "this site now follows %s as a slave\n", who)
	default:
		fmt.Fprintf(w, "this site refuses puts and does not follow %s (no ZooKeeper and no -follow): restart it as a slave\n", who)
	}
	return printFollowers(w, "switchover", who, rep.Followers, rep.FollowersNote)
}

// newMasterName names the slave a switchover made master for an operator:
// its site when known, else its slave group and slaveId spelt out (the
// report's group/slaveId, "meta-slave-group-hf/1", reads like a site name).
func newMasterName(rep bundle.SwitchoverReport) string {
	if rep.Site != "" {
		return "site " + rep.Site
	}
	group, id, ok := strings.Cut(rep.To, "/")
	if !ok {
		return rep.To
	}
	return fmt.Sprintf("the slave of group %s with slaveId %s", group, id)
}

// printFollowers lists the slave sites after a change of master and fails
// when one of them does not follow the new master.
func printFollowers(w io.Writer, op, master string, fs []bundle.FollowerReport, note string) error {
	var missing []string
	for _, f := range fs {
		who := f.Site
		if f.Self {
			who += " (this site)"
		}
		if f.Following {
			fmt.Fprintf(w, "slave site %s (slaveId %d) follows %s\n", who, f.SlaveID, master)
			continue
		}
		if f.OldMaster {
			fmt.Fprintf(w, "old master at site %s: %s\n", who, f.Reason)
			continue
		}
		fmt.Fprintf(w, "SLAVE SITE %s (slaveId %d) DOES NOT FOLLOW %s: %s\n", who, f.SlaveID, master, f.Reason)
		missing = append(missing, f.Site)
	}
	if note != "" {
		fmt.Fprintln(w, note)
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s: the new master took over, but %d slave site(s) do not follow it: %s (their logs say why; `metaq-server slave-status` there)",
			op, len(missing), strings.Join(missing, ", "))
	}
	fmt.Fprintf(w, "%s done\n", op)
	return nil
}

// printPromote renders a PromoteReport: the generation, how far behind the
// old master this site was in its log and, from the master's last lag
// report, per partition.
func printPromote(w io.Writer, body []byte) error {
	var rep bundle.PromoteReport
	if err := json.Unmarshal(body, &rep); err != nil {
		return fmt.Errorf("promote: the report %q: %w", body, err)
	}
	forced := ""
	if rep.Forced {
		forced = ", forced"
	}
	fmt.Fprintf(w, "promoted: this site is master at generation %d (took %s%s)\n", rep.Generation, round(rep.Took), forced)
	if rep.FinishedInBackground != "" {
		fmt.Fprintf(w, "a step after raising the generation failed first and was retried until it succeeded: %s\n", rep.FinishedInBackground)
	}
	if rep.FencedSession != "" {
		fmt.Fprintf(w, "the dead master's ZooKeeper session %s held the master node: taken at the new generation instead of waiting for the session to expire\n", rep.FencedSession)
	}
	if rep.Waited >= time.Second {
		fmt.Fprintf(w, "waited %s for the old master's ZooKeeper session to release the master node\n", round(rep.Waited))
	}
	fmt.Fprintf(w, "behind the old master when it stopped following: %d bytes of its log (master's durable end %d, applied here %d)\n",
		rep.BehindBytes, rep.MasterPos, rep.AppliedPos)
	lr := rep.LagReport
	switch {
	case lr != nil:
		fmt.Fprintf(w, "last lag report from the old master (received %s): %d bytes, %d messages behind in %d partitions\n",
			lr.Received.UTC().Format(time.RFC3339), lr.Bytes, lr.Messages, lr.Lagging)
		if len(lr.Partitions) > 0 {
			tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "partition\tbytes\tmessages\toldest missing\t")
			for _, p := range lr.Partitions {
				fmt.Fprintf(tw, "%s-%d\t%d\t%d\t%s\t\n", p.Topic, p.Partition, p.Bytes, p.Messages, round(p.Behind))
			}
			tw.Flush()
		}
		if n := lr.Lagging - len(lr.Partitions); n > 0 {
			fmt.Fprintf(w, "(%d more partitions behind, not listed)\n", n)
		}
	case rep.Lag != nil:
		fmt.Fprintf(w, "no per-partition lag report from the old master (an older version); its last gossiped summary: %d bytes, %d messages behind\n",
			rep.Lag.Bytes, rep.Lag.Messages)
	default:
		fmt.Fprintln(w, "no lag report from the old master: bytes and messages behind per partition are unknown")
	}
	fmt.Fprintf(w, "partition ends recorded for %d partitions: a returning old master cuts and saves aside what it holds beyond them\n", len(rep.Ends))
	return printFollowers(w, "promote", "this site", rep.Followers, rep.FollowersNote)
}

// round shortens a duration for people.
func round(d time.Duration) time.Duration {
	switch {
	case d <= 0:
		return 0
	case d < time.Second:
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Millisecond)
}
