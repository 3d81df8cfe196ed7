// Command configsync pushes a server.ini to every site of a MetaQ deployment
// and reports what each site did with it.
//
//	configsync keygen -o push.key
//	configsync push -f conf/server.ini -key push.key [-sites bj,hf,gz] [-dry-run] [-timeout 10s] [-allow-topic-removal] [-allow-unknown]
//	configsync check -f conf/server.ini [-allow-unknown]
//	configsync status [-json]
//	configsync diff [-f conf/server.ini]
//	configsync rollback -key push.key [-to VERSION] [-sites ...] [-timeout 10s] [-allow-topic-removal]
//
// push and check refuse a file with keys or sections the broker does not
// know (each named with a "did you mean"); -allow-unknown publishes it
// anyway, and the sites then start with it.
//
// keygen writes an ed25519 private key (mode 0600) and prints its public key
// for [nats] trustedKeys; push and rollback sign every version with -key
// (default $METAQ_CONFIGSYNC_KEY). Sites apply only versions signed by a key
// they trust; -unsigned publishes without a signature, for sites that set
// [nats] allowUnsigned=true.
//
// The NATS server, credentials, TLS files, bucket and subject come from the
// [nats] section of -f (default conf/server.ini, its overlay followed when
// present) and can be overridden with flags. Exit status: 0 on success, 1 when
// a site failed or did not answer, 2 on bad usage, an invalid file or a
// conflict with another push.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"metaq/broker/config"
	"metaq/broker/registry"
	"metaq/configsync"
	"metaq/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  configsync keygen -o push.key
  configsync push -f conf/server.ini -key push.key [-sites bj,hf,gz] [-dry-run] [-timeout 10s] [-allow-topic-removal] [-allow-unknown]
  configsync check -f conf/server.ini [-allow-unknown]
  configsync status [-json]
  configsync diff [-f conf/server.ini]
  configsync rollback -key push.key [-to VERSION] [-sites bj,hf] [-dry-run] [-timeout 10s] [-allow-topic-removal]
signing: -key FILE (default $METAQ_CONFIGSYNC_KEY) signs pushes; -unsigned only for allowUnsigned sites
common flags: -f FILE (NATS settings from its [nats] section), -nats URL, -creds FILE,
  -tls-cert FILE -tls-key FILE -tls-ca FILE, -bucket NAME, -subject PREFIX, -v
`

// common holds the flags every subcommand takes.
type common struct {
	file, url, creds, cert, key, ca, bucket, subject string
	verbose                                          bool
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.file, "f", "conf/server.ini", "server.ini to push, diff, or read [nats] settings from")
	fs.StringVar(&c.url, "nats", "", "NATS URL (default: [nats] url, else the local bundle's, else the ones recorded in ZooKeeper)")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file (default [nats] credsFile)")
	fs.StringVar(&c.cert, "tls-cert", "", "TLS client certificate (default [nats] tlsCert)")
	fs.StringVar(&c.key, "tls-key", "", "TLS client key (default [nats] tlsKey)")
	fs.StringVar(&c.ca, "tls-ca", "", "TLS CA bundle (default [nats] tlsCA)")
	fs.StringVar(&c.bucket, "bucket", "", "JetStream KV bucket (default [nats] bucket)")
	fs.StringVar(&c.subject, "subject", "", "subject prefix (default [nats] subject)")
	fs.BoolVar(&c.verbose, "v", false, "log NATS connection events to stderr")
}

// clientOptions builds the connection settings from the file's [nats]
// section (overlay followed when it can be read) and the override flags. The
// NATS servers come from -nats, else from where the bundles find them
// (findNATS): the file's [nats] url or the server its bundle embeds, the
// local bundle's configuration ($METAQ_CONF, default /etc/metaq/server.ini),
// the urls the bundles recorded in the file's ZooKeeper.
func (c *common) clientOptions(ctx context.Context, stderr io.Writer) (configsync.ClientOptions, error) {
	var n config.NATS
	var cfg *config.Server
	withOverlay := false
	if got, _, err := config.Load(c.file); err == nil {
		cfg, withOverlay = got, true
	} else if data, rerr := os.ReadFile(c.file); rerr == nil {
		// Without the overlay (not on this host), the shared file still
		// names the servers.
		cfg, _, _ = configsync.ParseShared(c.file, data)
	}
	if cfg != nil {
		n = cfg.NATS
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	url, source := c.url, "-nats"
	if url == "" {
		var err error
		if url, source, err = findNATS(ctx, c.file, cfg, withOverlay); err != nil {
			return configsync.ClientOptions{}, err
		}
		if source != "" {
			fmt.Fprintf(stderr, "NATS: %s (%s)\n", url, source)
		}
	}
	set(&n.CredsFile, c.creds)
	set(&n.TLSCert, c.cert)
	set(&n.TLSKey, c.key)
	set(&n.TLSCA, c.ca)
	set(&n.Bucket, c.bucket)
	set(&n.Subject, c.subject)
	logger := slog.New(slog.DiscardHandler)
	if c.verbose {
		logger = slog.New(slog.NewTextHandler(stderr, nil))
	}
	return configsync.ClientOptions{URL: url, NATS: n, Logger: logger}, nil
}

// localBundleConfig is the configuration of the bundle on this host.
func localBundleConfig() string {
	if p := os.Getenv("METAQ_CONF"); p != "" {
		return p
	}
	return "/etc/metaq/server.ini"
}

// findNATS looks for the deployment's NATS servers when -nats is not given
// and returns them with where they were found ("" when from the file's own
// [nats] url). It looks where a bundle does: the file's [nats] url, else the
// server its bundle embeds (with the overlay when it is next to the file),
// then the same for the local bundle's configuration, then the urls the
// bundles recorded in ZooKeeper. An embedded server's address is taken only
// when a NATS server answers there. The error lists what was tried.
func findNATS(ctx context.Context, file string, cfg *config.Server, withOverlay bool) (string, string, error) {
	if cfg != nil && cfg.NATS.URL != "" {
		return cfg.NATS.URL, "", nil
	}
	var tried []string
	embedded := func(c *config.Server, what string) (string, bool) {
		u := configsync.ServerURL(c)
		if natsAnswers(u) {
			return u, true
		}
		tried = append(tried, fmt.Sprintf("no NATS server answers at %s (%s)", u, what))
		return "", false
	}
	if cfg != nil {
		what := "the server the bundle of " + file + " embeds"
		if !withOverlay {
			what += ", read without its overlay"
		}
		if u, ok := embedded(cfg, what); ok {
			return u, what, nil
		}
	} else {
		tried = append(tried, file+" could not be read")
	}
	if p := localBundleConfig(); p != file {
		local, _, err := config.Load(p)
		switch {
		case err != nil:
			tried = append(tried, fmt.Sprintf("no local bundle configuration (%s, $METAQ_CONF): %v", p, shortErr(err)))
		case local.NATS.URL != "":
			return local.NATS.URL, "[nats] url of the local bundle's " + p, nil
		default:
			if u, ok := embedded(local, "embedded server of the local bundle's "+p); ok {
				return u, "embedded server of the local bundle's " + p, nil
			}
		}
	}
	if cfg != nil && cfg.ZooKeeper.Enable {
		zctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		reg, err := registry.New(zctx, registry.Options{Connect: cfg.ZooKeeper.Connect, Root: cfg.ZooKeeper.Root,
			ConnectionTimeout: 3 * time.Second, SessionTimeout: 10 * time.Second})
		if err != nil {
			tried = append(tried, fmt.Sprintf("ZooKeeper %s: %v", cfg.ZooKeeper.Connect, shortErr(err)))
		} else {
			urls, err := configsync.RecordedNATS(zctx, reg)
			reg.Close()
			switch {
			case err == nil && urls != "":
				return urls, "recorded by the bundles in ZooKeeper " + cfg.ZooKeeper.Connect, nil
			case err != nil:
				tried = append(tried, fmt.Sprintf("ZooKeeper %s: %v", cfg.ZooKeeper.Connect, shortErr(err)))
			default:
				tried = append(tried, "no bundle recorded a NATS url in ZooKeeper "+cfg.ZooKeeper.Connect+cfg.ZooKeeper.Root)
			}
		}
	}
	return "", "", fmt.Errorf("configsync: no NATS server found: %s has no [nats] url, and:\n  %s\nuse -nats",
		file, strings.Join(tried, "\n  "))
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// natsAnswers reports whether the first server of a NATS url greets with
// NATS's INFO line within a second: a port that merely accepts is not taken.
func natsAnswers(url string) bool {
	u := strings.TrimPrefix(strings.SplitN(url, ",", 2)[0], "nats://")
	conn, err := net.DialTimeout("tcp", u, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 5)
	_, err = io.ReadFull(conn, buf)
	return err == nil && string(buf) == "INFO "
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	if cli.IsHelp(cmd) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	// Each command has its own flag set: -h lists only what it takes.
	fs := flag.NewFlagSet("configsync "+cmd, flag.ContinueOnError)
	var c common
	var (
		sites, keyFile, out                      string
		dryRun, asJSON, allowRm, allowUn, noSign bool
		timeout                                  time.Duration
		to                                       uint64
	)
	sitesFlag := func() {
		fs.StringVar(&sites, "sites", "", "comma-separated sites to wait for (default: every site known to the bucket)")
		fs.BoolVar(&dryRun, "dry-run", false, "validate and show the per-site diff, publish nothing")
		fs.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the sites' answers")
		fs.BoolVar(&allowRm, "allow-topic-removal", false, "remove topics even when they still hold messages")
	}
	signFlags := func() {
		fs.StringVar(&keyFile, "key", os.Getenv("METAQ_CONFIGSYNC_KEY"), "private key that signs the version (configsync keygen), default $METAQ_CONFIGSYNC_KEY")
		fs.BoolVar(&noSign, "unsigned", false, "publish without a signature (only sites with [nats] allowUnsigned=true apply it)")
	}
	allowUnknownFlag := func() {
		fs.BoolVar(&allowUn, "allow-unknown", false, "accept keys and sections this project does not know (refused by default: a typo loses its setting)")
	}
	switch cmd {
	case "keygen":
		fs.StringVar(&out, "o", "", "file to write the private key to")
	case "check":
		fs.StringVar(&c.file, "f", "conf/server.ini", "server.ini to check")
		allowUnknownFlag()
	case "push":
		c.register(fs)
		sitesFlag()
		signFlags()
		allowUnknownFlag()
	case "rollback":
		c.register(fs)
		sitesFlag()
		signFlags()
		fs.Uint64Var(&to, "to", 0, "version to restore (default: the one before the desired version)")
	case "status":
		c.register(fs)
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	case "diff":
		c.register(fs)
	default:
		fmt.Fprintf(stderr, "configsync: unknown command %q\n%s", cmd, usage)
		return 2
	}
	if err := cli.Parse(fs, args, false, stdout, stderr); err != nil {
		return cli.ExitCode(err)
	}
	switch cmd {
	case "keygen":
		return keygen(out, stdout, stderr)
	case "check":
		return checkFile(c.file, allowUn, stdout, stderr)
	}
	var siteList []string
	for s := range strings.SplitSeq(sites, ",") {
		if s = strings.TrimSpace(s); s != "" {
			siteList = append(siteList, s)
		}
	}

	fileGiven := false
	fs.Visit(func(f *flag.Flag) { fileGiven = fileGiven || f.Name == "f" })
	var data []byte
	if cmd == "push" || (cmd == "diff" && fileGiven) {
		var err error
		if data, err = os.ReadFile(c.file); err != nil {
			fmt.Fprintf(stderr, "configsync: %v\n", err)
			return 2
		}
		// Validate before connecting: an invalid file never reaches NATS.
		_, warns, err := configsync.Validate(c.file, data)
		for _, w := range warns {
			fmt.Fprintf(stderr, "warning: %s\n", w)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		if err := config.CheckUnknown(warns); err != nil && cmd == "push" && !allowUn {
			fmt.Fprintf(stderr, "%v\nnothing published: fix the file, or push with -allow-unknown to publish it anyway\n", err)
			return 2
		}
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	opts, err := c.clientOptions(cctx, stderr)
	if err != nil {
		cancel()
		fmt.Fprintln(stderr, err)
		return 2
	}
	if (cmd == "push" || cmd == "rollback") && !dryRun {
		switch {
		case noSign:
			opts.AllowUnsigned = true
			fmt.Fprintln(stderr, "warning: publishing an unsigned version: only sites with [nats] allowUnsigned=true apply it")
		case keyFile == "":
			cancel()
			fmt.Fprintln(stderr, configsync.ErrNoSigningKey)
			return 2
		default:
			k, err := configsync.LoadSigningKey(keyFile)
			if err != nil {
				cancel()
				fmt.Fprintln(stderr, err)
				return 2
			}
			opts.SigningKey = k
		}
	}
	client, err := configsync.NewClient(cctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer client.Close()

	switch cmd {
	case "push":
		fmt.Fprintf(stdout, "validated %s (%d bytes)\n", c.file, len(data))
		rep, err := client.Push(ctx, configsync.PushOptions{File: c.file, Data: data, Sites: siteList,
			DryRun: dryRun, Timeout: timeout, OnPlan: printPlan(stdout, dryRun), AllowTopicRemoval: allowRm, AllowUnknown: allowUn})
		return report(stdout, stderr, rep, err, timeout)
	case "rollback":
		rep, err := client.Rollback(ctx, configsync.RollbackOptions{To: to, Sites: siteList, DryRun: dryRun,
			Timeout: timeout, OnPlan: printPlan(stdout, dryRun), AllowTopicRemoval: allowRm})
		return report(stdout, stderr, rep, err, timeout)
	case "status":
		return status(ctx, client, stdout, stderr, asJSON)
	default:
		if !fileGiven {
			return diffDeployed(ctx, client, stdout, stderr)
		}
		return diff(ctx, client, c.file, data, stdout, stderr)
	}
}

// checkFile is `configsync check`: what push would say about the file,
// without connecting anywhere.
func checkFile(file string, allowUnknown bool, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "configsync: %v\n", err)
		return 2
	}
	cfg, warns, err := configsync.Validate(file, data)
	for _, w := range warns {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if err := config.CheckUnknown(warns); err != nil && !allowUnknown {
		fmt.Fprintf(stderr, "%v\npush refuses it: fix the file, or push with -allow-unknown\n", err)
		return 2
	}
	if keys := config.SecretKeysIn(data); len(keys) > 0 {
		fmt.Fprintf(stderr, "configsync: %s sets %s: push refuses a secret (it would be stored in NATS and copied to every site); move it to each site's overlay\n",
			file, strings.Join(keys, ", "))
		return 2
	}
	fmt.Fprintf(stdout, "%s is valid: %d topics, push would publish it\n", file, len(cfg.Topics))
	return 0
}

// diffDeployed is `configsync diff` without -f: what every site runs against
// the desired version.
func diffDeployed(ctx context.Context, c *configsync.Client, stdout, stderr io.Writer) int {
	st, err := c.Status(ctx)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if st.Desired == nil {
		fmt.Fprintln(stdout, "no version pushed yet")
		return 0
	}
	d, err := c.Desired(ctx)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if len(st.Sites) == 0 {
		fmt.Fprintf(stdout, "desired v%d; no site has reported yet\n", d.Version)
		return 0
	}
	for _, s := range st.Sites {
		switch {
		case s.SHA256 == d.SHA256:
			fmt.Fprintf(stdout, "%s runs desired v%d\n", s.Site, d.Version)
		case s.Version == 0:
			fmt.Fprintf(stdout, "%s runs a file not published by configsync (sha256 %.12s), desired is v%d\n", s.Site, s.SHA256, d.Version)
		default:
			v, err := c.Version(ctx, s.Version)
			if err != nil {
				fmt.Fprintf(stdout, "%s runs v%d (not readable: %v), desired is v%d\n", s.Site, s.Version, err, d.Version)
				continue
			}
			fmt.Fprintf(stdout, "%s runs v%d, desired is v%d:\n", s.Site, s.Version, d.Version)
			fmt.Fprint(stdout, configsync.DiffText(fmt.Sprintf("%s v%d", s.Site, s.Version), fmt.Sprintf("desired v%d", d.Version), v.Data, d.Data))
		}
	}
	return 0
}

// keygen writes a new signing key to path (never over an existing file) and
// prints the public key the sites must trust.
func keygen(path string, stdout, stderr io.Writer) int {
	if path == "" {
		fmt.Fprintln(stderr, "configsync keygen: -o FILE is required")
		return 2
	}
	priv, pub, err := configsync.GenerateKey()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "configsync keygen: %v\n", err)
		return 2
	}
	if _, err := f.Write(priv); err != nil {
		f.Close()
		fmt.Fprintf(stderr, "configsync keygen: %v\n", err)
		return 1
	}
	if err := f.Close(); err != nil {
		fmt.Fprintf(stderr, "configsync keygen: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "private key written to %s (keep it on the pushing host only)\n", path)
	fmt.Fprintf(stdout, "public key: %s\n", pub)
	fmt.Fprintf(stdout, "trust it on every site (site overlay):\n[nats]\ntrustedKeys=%s\n", pub)
	return 0
}

// printPlan prints each site's preview; withDiff (a dry run) adds the line
// diff from what the site runs.
func printPlan(w io.Writer, withDiff bool) func([]configsync.SitePlan) {
	return func(plans []configsync.SitePlan) {
		if len(plans) == 0 {
			fmt.Fprintln(w, "no sites known: publishing without waiting for answers (use -sites)")
			return
		}
		fmt.Fprintln(w, "changes per site:")
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, p := range plans {
			line := p.Changes.String()
			if len(p.Shadowed) > 0 {
				line += " (the site's overlay sets " + strings.Join(p.Shadowed, ", ") + ": unchanged there)"
			}
			switch {
			case p.Note != "" && p.Diff == "":
				fmt.Fprintf(tw, "  %s\t%s\n", p.Site, p.Note)
			case p.Note != "":
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", p.Site, p.Note, line)
			default:
				fmt.Fprintf(tw, "  %s\tfrom v%d:\t%s\n", p.Site, p.Running, line)
			}
		}
		tw.Flush()
		if !withDiff {
			return
		}
		for _, p := range plans {
			if p.Diff != "" {
				fmt.Fprintf(w, "\n%s:\n%s", p.Site, p.Diff)
			}
		}
	}
}

func report(stdout, stderr io.Writer, rep *configsync.PushReport, err error, timeout time.Duration) int {
	if rep == nil {
		// Nothing was published: invalid input, a conflict with another
		// push, or the bucket unreachable.
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch {
	case rep.DryRun:
		fmt.Fprintln(stdout, "dry run: nothing published")
		return 0
	case rep.Unchanged:
		fmt.Fprintf(stdout, "version %d already holds these bytes (sha256 %s): nothing published\n", rep.Version, rep.SHA256[:12])
	case rep.RollbackOf > 0:
		fmt.Fprintf(stdout, "published version %d = bytes of version %d (previous %d, sha256 %s)\n", rep.Version, rep.RollbackOf, rep.Previous, rep.SHA256[:12])
	default:
		fmt.Fprintf(stdout, "published version %d (previous %d, sha256 %s)\n", rep.Version, rep.Previous, rep.SHA256[:12])
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	for _, s := range rep.Sites {
		res, ok := rep.Results[s]
		switch {
		case !ok:
			fmt.Fprintf(tw, "%s\tNO ANSWER\twithin %v\n", s, timeout)
		case !res.OK:
			fmt.Fprintf(tw, "%s\tFAILED\tv%d: %s (still running v%d)\n", s, res.Version, res.Error, res.Running)
		default:
			line := res.Changes().String()
			if res.Unchanged {
				line = "already running these bytes"
			}
			if len(res.PendingRestart) > 0 {
				line += "; pending restart: " + strings.Join(res.PendingRestart, ", ")
			}
			fmt.Fprintf(tw, "%s\tok\tv%d: %s\n", s, res.Running, line)
		}
	}
	tw.Flush()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func status(ctx context.Context, c *configsync.Client, stdout, stderr io.Writer, asJSON bool) int {
	st, err := c.Status(ctx)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return 0
	}
	if st.Desired == nil {
		fmt.Fprintln(stdout, "desired: none pushed yet")
	} else {
		fmt.Fprintf(stdout, "desired: v%d sha256 %s pushed %s by %s\n", st.Desired.Version, st.Desired.SHA256[:12],
			st.Desired.PushedAt.Format(time.RFC3339), st.Desired.PushedBy)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tVERSION\tSHA256\tAPPLIED\tLAST SEEN\tPENDING RESTART\tERROR")
	for _, s := range st.Sites {
		applied := "-"
		if !s.AppliedAt.IsZero() {
			applied = s.AppliedAt.Format(time.RFC3339)
		}
		sum := s.SHA256
		if len(sum) > 12 {
			sum = sum[:12]
		}
		errText := s.Error
		if errText != "" {
			errText = fmt.Sprintf("v%d: %s", s.FailedVersion, errText)
		}
		seen := time.Since(s.Heartbeat).Round(time.Second).String() + " ago"
		if s.Stale(time.Now()) {
			seen += " (DOWN?)"
		}
		fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\t%s\t%s\t%s\n", s.Site, s.Version, sum, applied,
			seen, strings.Join(s.PendingRestart, ","), errText)
	}
	tw.Flush()
	return 0
}

func diff(ctx context.Context, c *configsync.Client, file string, data []byte, stdout, stderr io.Writer) int {
	d, err := c.Desired(ctx)
	if errors.Is(err, configsync.ErrNoDesired) {
		fmt.Fprintf(stdout, "no version pushed yet: %s would be version 1\n", file)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	text := configsync.DiffText(fmt.Sprintf("desired v%d", d.Version), file, d.Data, data)
	if text == "" {
		fmt.Fprintf(stdout, "%s is identical to desired version %d\n", file, d.Version)
		return 0
	}
	old, _, err := config.Parse(d.File, d.Data)
	if err == nil {
		cur, _, _ := config.Parse(file, data)
		fmt.Fprintf(stdout, "%s against desired v%d: %s\n", file, d.Version, config.Diff(old, cur))
	}
	fmt.Fprint(stdout, text)
	return 0
}
