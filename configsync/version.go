package configsync

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"metaq/broker/config"
)

// Keys of the bucket (see the package documentation).
const (
	keyDesired       = "desired"
	keyVersionPrefix = "version."
	keySitePrefix    = "site."
)

// Defaults for the [nats] keys configsync reads when the file leaves them out.
const (
	DefaultBucket  = "metaq_config"
	DefaultSubject = "metaq.config"
)

var (
	// ErrConflict is returned by Push and Rollback when another push changed
	// the desired version between our read and our compare-and-set.
	ErrConflict = errors.New("configsync: conflict: another push changed the desired version first")
	// ErrNoDesired is returned when the bucket holds no desired version yet.
	ErrNoDesired = errors.New("configsync: no version has been pushed yet")
	// ErrVersionNotFound is returned by Rollback when the requested version is
	// in neither version.<N> nor the history of the desired key.
	ErrVersionNotFound = errors.New("configsync: version not found")
	// ErrTopicRemoval is returned by Push and Rollback, before anything is
	// published, when the version removes topics that still hold messages
	// and AllowTopicRemoval is not set; agents refuse such a version too.
	ErrTopicRemoval = errors.New("configsync: the new version removes topics that still hold messages")
	// ErrBucketRewound is returned by Push and Rollback, before anything is
	// published, when the bucket does not hold what the signed versions
	// say it should: its desired version is older than a version signed
	// by a trusted key, or than what a site runs (someone who can write to
	// the bucket set it back), or its version number cannot grow.
	ErrBucketRewound = errors.New("configsync: the bucket's desired version was set back")
	// ErrNotSuccessor is returned (wrapped) by an agent for a version that
	// is not a signed successor of the version it applied: older, or not
	// chained to it by signed versions.
	ErrNotSuccessor = errors.New("configsync: not a signed successor of the version applied here")
	// ErrSitesFailed is returned by Push and Rollback when a site reported an
	// error or did not answer in time; the per-site results say which.
	ErrSitesFailed = errors.New("configsync: not every site applied the version")
)

// Version is one published server.ini: the value of the desired key and of
// version.<N>.
type Version struct {
	Version  uint64    `json:"version"`
	SHA256   string    `json:"sha256"` // hex SHA-256 of Data
	Data     []byte    `json:"data"`   // the file's exact bytes
	File     string    `json:"file,omitempty"`
	PushedAt time.Time `json:"pushedAt"`
	PushedBy string    `json:"pushedBy,omitempty"` // host that pushed
	// RollbackOf is the version whose bytes this one republishes (0 for a push).
	RollbackOf uint64 `json:"rollbackOf,omitempty"`
	// AllowTopicRemoval lets this version remove topics that still hold
	// messages at a site; without it an agent refuses such a version.
	AllowTopicRemoval bool `json:"allowTopicRemoval,omitempty"`
	// Prev is the Digest of the version this one was published on top of
	// ("" for the first), signed with it: versions form a signed chain, and
	// an agent applies only a signed successor of what it applied.
	Prev string `json:"prev,omitempty"`
	// Signature is the pusher's ed25519 signature (see sign.go); SignedBy
	// names its public key, for messages only: agents check the signature
	// against the keys they trust, never against this field.
	Signature []byte `json:"signature,omitempty"`
	SignedBy  string `json:"signedBy,omitempty"`
}

// Check reports whether Data matches SHA256.
func (v *Version) Check() error {
	if got := hashHex(v.Data); got != v.SHA256 {
		return fmt.Errorf("configsync: version %d: sha256 mismatch: stored %s, data %s", v.Version, v.SHA256, got)
	}
	return nil
}

// SiteState is what an agent records under site.<name>.
type SiteState struct {
	Site      string    `json:"site"`
	Host      string    `json:"host,omitempty"`
	Version   uint64    `json:"version"` // version running (0 = not from configsync)
	SHA256    string    `json:"sha256"`  // hash of the server.ini on disk
	AppliedAt time.Time `json:"appliedAt,omitempty"`
	// PendingRestart lists keys whose new value takes effect only after a
	// restart: the difference between the configuration the process started
	// with and the one on disk.
	PendingRestart []string `json:"pendingRestart,omitempty"`
	// Error is the last failed apply ("" after a success); FailedVersion is
	// the version it concerned.
	Error         string    `json:"error,omitempty"`
	FailedVersion uint64    `json:"failedVersion,omitempty"`
	Heartbeat     time.Time `json:"heartbeat"`
	// TopicMessages counts the messages this site stores per configured
	// topic, refreshed with the heartbeat, so that a push that removes a
	// topic can say what it would leave behind before it publishes.
	TopicMessages map[string]int64 `json:"topicMessages,omitempty"`
	// OverlayKeys names the "section.key"s the site's overlay sets (names
	// only, see OverlayKeys), for the pusher's per-site preview.
	OverlayKeys []string `json:"overlayKeys,omitempty"`
	// Overlay is the site's overlay without the lines that may hold
	// secrets (PublicOverlay).
	Overlay string `json:"overlay,omitempty"`
	// Running is, while the site runs a file configsync did not publish
	// (Version 0), that file without the lines that may hold secrets
	// (PublicOverlay), so a push's preview can show what it would change.
	Running string `json:"running,omitempty"`
	// HeartbeatInterval is how often the agent refreshes Heartbeat.
	HeartbeatInterval time.Duration `json:"heartbeatInterval"`
}

// Stale reports whether the agent missed three heartbeats by now: the site
// is probably down, and its entry shows what it ran when it was last seen.
func (s SiteState) Stale(now time.Time) bool {
	every := s.HeartbeatInterval
	if every <= 0 {
		every = 10 * time.Second
	}
	return now.Sub(s.Heartbeat) > 3*every
}

// Result is an agent's answer to a push: what it did with one version.
type Result struct {
	Site    string `json:"site"`
	Version uint64 `json:"version"` // the version this result is about
	// Running is the version the site runs after processing (Version on
	// success, the previous one on failure).
	Running        uint64   `json:"running"`
	SHA256         string   `json:"sha256,omitempty"` // of the version this result is about, as the site read it
	OK             bool     `json:"ok"`
	Error          string   `json:"error,omitempty"`
	TopicsAdded    []string `json:"topicsAdded,omitempty"`
	TopicsChanged  []string `json:"topicsChanged,omitempty"`
	TopicsRemoved  []string `json:"topicsRemoved,omitempty"`
	RestartKeys    []string `json:"restartKeys,omitempty"`    // keys this version changed that need a restart
	PendingRestart []string `json:"pendingRestart,omitempty"` // all keys waiting for a restart
	Unchanged      bool     `json:"unchanged,omitempty"`      // the site already ran these bytes
	// TopicMessages answers a topic-count request (request.Topics): the
	// messages the site holds per configured topic.
	TopicMessages map[string]int64 `json:"topicMessages,omitempty"`
}

// request is what a pusher sends on <subject>.<site>.
type request struct {
	Version uint64 `json:"version"`
	// Topics asks for the site's message count per topic instead (read
	// only: it changes nothing on the site).
	Topics bool `json:"topics,omitempty"`
}

func hashHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func versionKey(n uint64) string { return keyVersionPrefix + strconv.FormatUint(n, 10) }

func siteKey(site string) string { return keySitePrefix + site }

// siteNameRE keeps site names usable as one NATS subject token and KV key part.
var siteNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidSite reports whether name can be used as a site name.
func ValidSite(name string) error {
	if !siteNameRE.MatchString(name) {
		return fmt.Errorf("configsync: invalid site name %q: use letters, digits, '-' or '_'", name)
	}
	return nil
}

func siteSubject(prefix, site string) string { return prefix + "." + site }

func decodeVersion(b []byte) (*Version, error) {
	var v Version
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("configsync: decode version: %w", err)
	}
	return &v, nil
}

func decodeSite(b []byte) (*SiteState, error) {
	var s SiteState
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("configsync: decode site state: %w", err)
	}
	return &s, nil
}

// bucketName and subjectPrefix apply configsync's defaults to a [nats] section.
func bucketName(n config.NATS) string {
	if n.Bucket == "" {
		return DefaultBucket
	}
	return n.Bucket
}

func subjectPrefix(n config.NATS) string {
	s := strings.TrimSuffix(n.Subject, ".")
	if s == "" {
		return DefaultSubject
	}
	return s
}

// Changes returns the topic and restart-key lists of r as a config.Changes.
func (r Result) Changes() config.Changes {
	return config.Changes{TopicsAdded: r.TopicsAdded, TopicsChanged: r.TopicsChanged,
		TopicsRemoved: r.TopicsRemoved, RestartKeys: r.RestartKeys}
}
