package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"metaq/internal/atomicfile"
)

// OffsetRecord is a consumer group's position in one partition: the next
// offset to fetch and the id of the last message consumed (-1 when the
// offset moved without consuming, e.g. after a 301).
type OffsetRecord struct {
	Topic     string
	Partition Partition
	Offset    int64
	MsgID     int64
}

// OffsetStore keeps consumer offsets. Implementations must be safe for
// concurrent use.
type OffsetStore interface {
	// Load returns the saved record; ok is false when there is none.
	Load(ctx context.Context, group, topic string, p Partition) (rec OffsetRecord, ok bool, err error)
	// Commit saves records (only those that changed are passed).
	Commit(ctx context.Context, group string, recs []OffsetRecord) error
}

// ZKOffsetStore keeps offsets where MetaQ's ZkOffsetStorage does:
// <root>/consumers/<group>/offsets/<topic>/<brokerId>-<partition>, value
// "<msgId>-<offset>" (see Consumer offsets in broker/wire/doc.go).
type ZKOffsetStore struct {
	c *Client
}

// NewZKOffsetStore returns the ZooKeeper store of c, which must have
// ZooKeeper configured.
func NewZKOffsetStore(c *Client) (*ZKOffsetStore, error) {
	if c.zk == nil {
		return nil, errors.New("client: ZooKeeper offset store needs ZooKeeper")
	}
	return &ZKOffsetStore{c: c}, nil
}

func (s *ZKOffsetStore) path(group, topic string, p Partition) string {
	return fmt.Sprintf("%s/consumers/%s/offsets/%s/%s", s.c.cfg.ZKRoot, group, topic, p)
}

// ParseOffsetValue parses an offsets node value: "<msgId>-<offset>", split
// at the last '-', or a plain "<offset>" as written before MetaQ 1.4.
func ParseOffsetValue(v string) (offset, msgID int64, err error) {
	v = strings.TrimSpace(v)
	i := strings.LastIndexByte(v, '-')
	if i <= 0 {
		off, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("client: bad offset value %q", v)
		}
		return off, -1, nil
	}
	id, err1 := strconv.ParseInt(v[:i], 10, 64)
	off, err2 := strconv.ParseInt(v[i+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("client: bad offset value %q", v)
	}
	return off, id, nil
}

// FormatOffsetValue is the inverse of ParseOffsetValue.
func FormatOffsetValue(offset, msgID int64) string {
	return strconv.FormatInt(msgID, 10) + "-" + strconv.FormatInt(offset, 10)
}

// Load implements OffsetStore.
func (s *ZKOffsetStore) Load(ctx context.Context, group, topic string, p Partition) (OffsetRecord, bool, error) {
	d, ok, err := s.c.zk.get(ctx, s.path(group, topic, p))
	if err != nil || !ok || len(d) == 0 {
		return OffsetRecord{}, false, err
	}
	off, id, err := ParseOffsetValue(string(d))
	if err != nil {
		return OffsetRecord{}, false, err
	}
	return OffsetRecord{Topic: topic, Partition: p, Offset: off, MsgID: id}, true, nil
}

// Commit implements OffsetStore.
func (s *ZKOffsetStore) Commit(ctx context.Context, group string, recs []OffsetRecord) error {
	var errs []error
	for _, r := range recs {
		if err := s.c.zk.setPersistent(ctx, s.path(group, r.Topic, r.Partition), []byte(FormatOffsetValue(r.Offset, r.MsgID))); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// List returns every saved offset of group for topic, sorted by partition.
func (s *ZKOffsetStore) List(ctx context.Context, group, topic string) ([]OffsetRecord, error) {
	dir := fmt.Sprintf("%s/consumers/%s/offsets/%s", s.c.cfg.ZKRoot, group, topic)
	kids, err := s.c.zk.children(ctx, dir)
	if err != nil {
		return nil, err
	}
	var out []OffsetRecord
	for _, k := range kids {
		p, err := ParsePartition(k)
		if err != nil {
			continue
		}
		r, ok, err := s.Load(ctx, group, topic, p)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition.String() < out[j].Partition.String() })
	return out, nil
}

// FileOffsetStore keeps offsets in a local JSON file, as MetaQ's
// LocalOffsetStorage does (~/.meta_offsets): a map from group to a list of
// {"topic", "partition":{"brokerId","partition"}, "offset", "msgId"}. It is
// used for broadcast consumers and without ZooKeeper. Writes go to a temp
// file that is synced and renamed over the old one.
type FileOffsetStore struct {
	path string
	mu   sync.Mutex
	data map[string][]fileOffset
}

type fileOffset struct {
	Topic     string `json:"topic"`
	Partition struct {
		BrokerID  int `json:"brokerId"`
		Partition int `json:"partition"`
	} `json:"partition"`
	Offset int64 `json:"offset"`
	MsgID  int64 `json:"msgId"`
}

// DefaultOffsetFile is ~/.meta_offsets.
func DefaultOffsetFile() string {
	home, err := os.UserHomeDir()
	if err != nil {
		home = "."
	}
	return filepath.Join(home, ".meta_offsets")
}

// NewFileOffsetStore opens (or starts) the offsets file at path.
func NewFileOffsetStore(path string) (*FileOffsetStore, error) {
	s := &FileOffsetStore{path: path, data: map[string][]fileOffset{}}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("client: read offsets %s: %w", path, err)
	}
	if len(strings.TrimSpace(string(b))) > 0 {
		if err := json.Unmarshal(b, &s.data); err != nil {
			return nil, fmt.Errorf("client: parse offsets %s: %w", path, err)
		}
	}
	return s, nil
}

// Load implements OffsetStore.
func (s *FileOffsetStore) Load(_ context.Context, group, topic string, p Partition) (OffsetRecord, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.data[group] {
		if f.Topic == topic && f.Partition.BrokerID == p.BrokerID && f.Partition.Partition == p.Partition {
			return OffsetRecord{Topic: topic, Partition: p, Offset: f.Offset, MsgID: f.MsgID}, true, nil
		}
	}
	return OffsetRecord{}, false, nil
}

// Commit implements OffsetStore.
func (s *FileOffsetStore) Commit(_ context.Context, group string, recs []OffsetRecord) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.data[group]
	for _, r := range recs {
		found := false
		for i := range list {
			f := &list[i]
			if f.Topic == r.Topic && f.Partition.BrokerID == r.Partition.BrokerID && f.Partition.Partition == r.Partition.Partition {
				f.Offset, f.MsgID, found = r.Offset, r.MsgID, true
			}
		}
		if !found {
			var f fileOffset
			f.Topic, f.Offset, f.MsgID = r.Topic, r.Offset, r.MsgID
			f.Partition.BrokerID, f.Partition.Partition = r.Partition.BrokerID, r.Partition.Partition
			list = append(list, f)
		}
	}
	s.data[group] = list
	b, err := json.Marshal(s.data)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(s.path, b, 0o644); err != nil {
		return fmt.Errorf("client: write offsets: %w", err)
	}
	return nil
}

// idKey is a processed message: its group and id.
type idKey struct {
	group string
	id    int64
}

// idCache is the LRU of processed message ids (MetaQ's MessageIdCache,
// keyed by group and id). One cache is shared by the consumers of a process,
// as the Java client shares one per JVM, so a partition that moves between
// two consumers of the same process is not delivered twice. A nil cache
// (size 0 or less) remembers nothing.
type idCache struct {
	lru *lru.Cache[idKey, struct{}]
}

// IDCacheSize is the number of processed message ids the process remembers
// to drop duplicates (MetaQ's metaq.consumer.message_ids.lru_cache.size,
// default 4096). Set it before the first consumer starts.
var IDCacheSize = 4096

var (
	sharedIDsOnce sync.Once
	sharedIDs     *idCache
)

func processIDCache() *idCache {
	sharedIDsOnce.Do(func() { sharedIDs = newIDCache(IDCacheSize) })
	return sharedIDs
}

func newIDCache(size int) *idCache {
	if size <= 0 {
		return nil
	}
	c, err := lru.New[idKey, struct{}](size)
	if err != nil {
		panic(err) // only for size <= 0, excluded above
	}
	return &idCache{lru: c}
}

// seen reports whether id was added and not yet evicted; it does not make
// id more recent (MetaQ's cache checks the same way).
func (c *idCache) seen(id idKey) bool {
	return c != nil && c.lru.Contains(id)
}

// add remembers id as the most recent.
func (c *idCache) add(id idKey) {
	if c != nil {
		c.lru.Add(id, struct{}{})
	}
}
