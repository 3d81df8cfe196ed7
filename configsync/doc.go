// Package configsync rolls a server.ini out to every site of a MetaQ
// deployment and reports, per site, what each one did with it.
//
// # Pieces
//
//   - [Client] (used by the configsync command) validates a file with the
//     broker's own loader, publishes it as a new version and collects one
//     answer per site (push, status, diff, rollback).
//   - [Agent] runs inside every bundle. It watches the desired version, applies
//     it to the site and records what it did.
//   - [Reloader] is the small interface through which the agent changes the
//     running broker; the bundle (cmd/) supplies it.
//   - [StartEmbeddedNATS] runs a NATS server with JetStream inside a
//     single-machine bundle that has no NATS URL configured.
//   - [StartBundle] is the one call a bundle makes: the embedded server when
//     the nats section has no url, then the agent; [Bundle.Close] stops both.
//
// An agent connects in the background: a bundle starts even while NATS is
// unreachable, and the agent catches up when it connects.
//
// # Storage: one JetStream key-value bucket
//
// The bucket is [config.NATS].Bucket (default "metaq_config"). Its keys:
//
//	desired          the version every site should run: a JSON [Version] holding
//	                 the file's exact bytes, their SHA-256, the version number,
//	                 when it was pushed, for a rollback which version it
//	                 restores, and the pusher's signature.
//	version.<N>      a copy of every version ever published, so rollback and
//	                 diff can find old bytes even after the bucket's per-key
//	                 history has rolled over.
//	site.<name>      the [SiteState] an agent last recorded: version, hash,
//	                 applied when, keys pending a restart, last error, a
//	                 heartbeat, its messages per topic and its overlay without
//	                 secret lines (for the pusher's checks and preview). It
//	                 outlives the agent, so status also covers sites that are
//	                 down.
//
// <name> is the agent's name: [config.NATS].Agent, default the [site] name.
// A site with several brokers gives each bundle its own (bj-1, bj-2).
//
// Pushes never rewrite the operator's file: the bytes stored are the bytes
// read (ini.v1 drops ";;" comments and blank lines when it writes), and the
// file an agent writes to disk is byte-for-byte the pushed one.
//
// # Versions and conflicts
//
// A push reads "desired" and its revision, then writes version N+1 with
// KeyValue.Update on that revision (Create when the key does not exist yet).
// When two pushes race, exactly one Update succeeds; the other fails with
// [ErrConflict] and nothing else is written. Rollback publishes an older
// version's bytes as a new version through the same compare-and-set.
//
// # Scatter-gather
//
// After the compare-and-set succeeds the pusher sends {"version":N} on
// "<subject>.<site>" (subject prefix [config.NATS].Subject, default
// "metaq.config") with a reply inbox, once per expected site, and repeats it
// every second for sites that have not answered, so a site that comes back
// during the wait still answers. An agent answers when it has processed
// version N (or a newer one) with a [Result]. The pusher stops when every
// expected site answered or the timeout passed, and names the missing sites.
// Expected sites are the ones given with -sites, or every site that has a
// site.<name> entry in the bucket.
//
// The request carries only a version number, never configuration: an agent
// applies only what it reads from its own bucket, and checks the SHA-256
// stored with it. A message on another subject or from another bucket cannot
// change a site.
//
// # Signed versions
//
// Anyone who can write to the bucket could otherwise change every site. The
// pusher signs each version with an ed25519 private key ([ClientOptions]
// SigningKey; `configsync keygen` makes one, `push -key` uses it) over its
// number, the SHA-256 of its bytes and the version a rollback restores. An
// agent applies a version only when the signature verifies with a key the
// configuration in effect lists in [nats] trustedKeys (normally in the site's
// overlay, which no push writes). Anything else is not applied, does not
// count as processed (a forged huge version number cannot make the agent
// skip real pushes) and is recorded in site.<name> as the site's error, so
// `configsync status` shows it. Safe default: a site with no trusted key
// refuses every push and warns at start; [nats] allowUnsigned=true accepts
// unsigned versions with a loud warning at every start. Rollback re-signs old
// bytes only when a trusted key signed them. A push refuses a file that sets
// a secret key ([site] token, [gossip] key): the bucket and every site would
// hold it.
//
// Versions are numbered by what was signed, never by an unsigned entry: each
// version signs the Digest of the one it follows (Prev), so the versions form
// a signed chain. A pusher builds on the desired version only when a trusted
// key signed it, and fails with [ErrBucketRewound], publishing nothing, when
// a newer signed version.<N> or a site's running version shows the desired
// key was set back (or when the number cannot grow); an answer about other
// bytes under the pushed number is not taken as this push's. An agent
// refuses, with [ErrNotSuccessor] in its state, a version older than the one
// it applied and one that the signed versions in the bucket do not link to
// it; the sidecar (server.ini.configsync) keeps the version applied last and
// its digest even after the file is edited by hand, so a restart cannot be
// made to apply an older genuine version. The first version a site ever
// applies (or the first after an upgrade from unchained versions) is taken on
// its signature alone.
//
// # Applying on a site
//
// The agent watches "desired" (the watch delivers the latest value first, so a
// site that was down applies the newest version when it returns) and, for each
// new version:
//
//  1. checks the signature and that the version follows the one it applied
//     (see above);
//  2. verifies the SHA-256 of the bytes;
//  3. validates them again with config.ParseWithOverlay, merged with the site's
//     overlay file (see below);
//  4. copies the file it is replacing to server.ini.v<old version> (or
//     server.ini.prev when the old version is unknown), keeping the newest
//     [Options].KeepVersions copies;
//  5. writes the new bytes atomically: temporary file in the same directory,
//     fsync, rename over server.ini, fsync of the directory;
//  6. calls the [Reloader]. [topic=...] changes take effect in process;
//     [system] and [zookeeper] changes cannot, and are reported as pending a
//     restart (computed against the configuration the process started with, so
//     a later push that reverts a key clears it again).
//
// If validation, the write or the reload fails, the agent puts the previous
// bytes back (atomically, as above), the broker keeps running its previous
// configuration, and the error is recorded in site.<name> and sent to the
// pusher.
//
// # Removing topics
//
// A version without a topic's section makes every broker unregister the
// topic from ZooKeeper and refuse puts to it. Before publishing such a
// version, Push asks every agent how many messages it holds per topic (a
// {"topics":true} request, answered read-only; the heartbeat's counts when
// an agent does not answer) and refuses with [ErrTopicRemoval], naming the
// counts, unless AllowTopicRemoval is set; an agent refuses such a version
// too, so a count that grew meanwhile is still caught.
//
// # Finding the servers
//
// Bundles record the NATS urls their agents use under <zkRoot>/configsync/nats
// ([RecordNATS]); the configsync command falls back to them ([RecordedNATS])
// when neither -nats, the file's [nats] url nor the local bundle's
// configuration names a server.
//
// # Site-specific settings: the overlay file
//
// One server.ini is shared by every site, but some settings belong to one
// host: brokerId/slaveId, hostName, serverPort and the other ports, dataPath and
// dataLogPath, the [site] name, listen addresses. They live in a per-site
// overlay file, named by "overlay" in [site] or by [Options].OverlayPath
// (a relative path is taken from server.ini's directory). The overlay has the
// same ini syntax; every key it sets replaces the same key of server.ini when
// the broker loads its configuration (config.ParseWithOverlay). A push never
// writes the overlay, so a site keeps its identity whatever file is pushed,
// and the operator edits it by hand on that host only. A site that wrote its
// data directory, its overlay's name or a secret into server.ini itself
// refuses a version that would change or drop them (ErrHostKeys), naming
// them: they belong in its overlay. A pushed key that needs a restart (a
// port, a listener) takes effect at the restart, not at the reload.
package configsync
