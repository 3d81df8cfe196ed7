package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"metaq/internal/cli"
	"metaq/internal/portprobe"
	"metaq/topology"
)

// init registers `metaq lag`: it asks a bundle's dashboard endpoint for the lag
// report (/lag, served by topology.Handler) and prints one row per slave
// group and per consumer group, or the JSON document with -json.
func init() {
	commands["lag"] = command{
		summary: "replication and consumer-group lag per site, from a bundle's /lag",
		run: func(ctx context.Context, g *globals, args []string) error {
			// The global flags are accepted after the command too, as for
			// every other command, though lag does not use ZooKeeper itself.
			return lagCommand(ctx, args, g.stdout, g.stderr, nil)
		},
	}
}

// lagCommand parses args and prints the report; extraFlags, when set, adds
// more flags to the flag set.
func lagCommand(ctx context.Context, args []string, stdout, stderr io.Writer, extraFlags func(*flag.FlagSet)) error {
	fs := flag.NewFlagSet("metaq lag", flag.ContinueOnError)
	if extraFlags != nil {
		extraFlags(fs)
	}
	addr := fs.String("addr", "127.0.0.1:8120", "bundle dashboard address (host:port or http(s)://host:port), dashboardHttpPort")
	path := fs.String("path", "/lag", "path of the lag report on the dashboard")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	token := fs.String("token", os.Getenv("METAQ_TOKEN"), "dashboard token ([site] token), default $METAQ_TOKEN")
	consumers := fs.Bool("consumers", true, "include consumer-group lag (reads offsets from ZooKeeper on the bundle)")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintln(w, "usage: metaq lag [-addr host:port] [-json] [-token t] [-consumers=false]")
		fmt.Fprintln(w, "Prints replication lag per slave group (site, partitions, bytes, messages, seconds behind, state)")
		fmt.Fprintln(w, "and consumer-group lag per site, as one bundle sees the gossip pool; consumer groups of each broker id")
		fmt.Fprintln(w, "come from its current master's dashboard (same -token), whichever bundle -addr names.")
		fs.PrintDefaults()
	}
	if err := cli.Parse(fs, args, false, stdout, stderr); err != nil {
		return err
	}
	url := *addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.TrimRight(url, "/") + *path
	if !*consumers {
		url += "?consumers=0"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("lag: %w", err)
	}
	if *token != "" {
		req.Header.Set("Authorization", "Bearer "+*token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if host := req.URL.Host; host != "" {
			// Not ctx: it may be what ran out.
			if answer, ok := portprobe.MetaQ(context.Background(), host, time.Second); ok {
				return fmt.Errorf("lag: %s is a MetaQ broker port (it answered %q to MetaQ's version command), not a dashboard: -addr takes the bundle's dashboard address (dashboardHttpPort, default 8120)",
					host, answer)
			}
		}
		return fmt.Errorf("lag: %s did not answer HTTP (is it the bundle's dashboard address, dashboardHttpPort?): %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("lag: read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("lag: %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var doc topology.LagDocument
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("lag: %s did not return a lag report: %w", url, err)
	}
	if *consumers && doc.ConsumerScope != topology.ScopePool {
		// A bundle that does not merge itself reports consumer groups only
		// for the broker id it is the master of; after a failover the one
		// asked may be a slave, or a master of one id among several. Each
		// id's current master is asked.
		fetch := topology.HTTPLagFetcher(http.DefaultClient, req.URL.Scheme, *path, *token)
		if topology.MergeConsumers(ctx, &doc, fetch) {
			if body, err = replaceConsumers(body, doc); err != nil {
				return fmt.Errorf("lag: %w", err)
			}
		}
	}
	if *asJSON {
		var out bytes.Buffer
		if err := json.Indent(&out, body, "", "  "); err != nil {
			return fmt.Errorf("lag: %w", err)
		}
		out.WriteByte('\n')
		_, err := stdout.Write(bytes.TrimLeft(out.Bytes(), "\n"))
		return err
	}
	return printLag(stdout, doc)
}

// printLag writes the two tables of `metaq lag`.
func printLag(w io.Writer, doc topology.LagDocument) error {
	fmt.Fprintf(w, "as seen by %s (site %s) at %s\n\n", doc.Node, doc.Site, doc.Time.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SLAVE GROUP\tSITE\tBROKER\tPARTITIONS\tBYTES\tMESSAGES\tSECONDS BEHIND\tSTATE")
	if len(doc.Groups) == 0 {
		fmt.Fprintln(tw, "(none)\t\t\t\t\t\t\t")
	}
	for _, g := range doc.Groups {
		group, site := g.SlaveGroup, g.Site
		if group == "" {
			group = "?"
		}
		if site == "" {
			site = "?"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", group, site, g.BrokerID, g.Partitions, g.Bytes, g.Messages,
			strconv.FormatFloat(g.SecondsBehind, 'f', 1, 64), g.State)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if gw := doc.Gateway; gw != nil {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "WRITE GATEWAY\tFORWARDED\tNOT SENT\tUNKNOWN\tACCEPTED LOCALLY\tREFUSED\tDRAINED\tOUTBOX ENTRIES\tOUTBOX BYTES\tOLDEST (S)\tDRAIN")
		entries, bytes, oldest, drain := "-", "-", "-", "-"
		if ob := gw.Outbox; ob != nil {
			entries = strconv.FormatInt(ob.Entries, 10)
			bytes = fmt.Sprintf("%d/%d", ob.Bytes, ob.MaxBytes)
			oldest = strconv.FormatFloat(ob.OldestAgeSeconds, 'f', 1, 64) + "/" + strconv.FormatFloat(ob.MaxAgeSeconds, 'f', 0, 64)
			drain = "ok"
			if ob.DrainError != "" {
				drain = ob.DrainError
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", doc.Site, gw.Forwarded, gw.NotSent, gw.Unknown, gw.Accepted, gw.Refused,
			gw.Drained, entries, bytes, oldest, drain)
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(doc.Consumers) == 0 && doc.ConsumerError == "" {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONSUMER GROUP\tSITE\tROOT\tTOPIC\tBROKER\tPARTITIONS\tBYTES")
	for _, c := range doc.Consumers {
		site := c.Site
		if site == "" {
			site = "(master root)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\n", c.Group, site, c.Root, c.Topic, c.BrokerID, c.Partitions, c.Bytes)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if doc.ConsumerError != "" {
		fmt.Fprintf(w, "consumer offsets unavailable: %s\n", doc.ConsumerError)
		return errors.New("lag: consumer offsets unavailable")
	}
	return nil
}

// replaceConsumers puts doc's merged consumer groups (and consumer error)
// into the JSON body that -json prints, leaving the rest as the bundle sent it.
func replaceConsumers(body []byte, doc topology.LagDocument) ([]byte, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, err
	}
	c, err := json.Marshal(doc.Consumers)
	if err != nil {
		return nil, err
	}
	raw["consumerGroups"] = c
	delete(raw, "consumerError")
	if doc.ConsumerError != "" {
		e, _ := json.Marshal(doc.ConsumerError)
		raw["consumerError"] = e
	}
	return json.Marshal(raw)
}
