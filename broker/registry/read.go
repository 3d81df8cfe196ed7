package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Broker is one broker id as clients see it in <root>/brokers/ids.
type Broker struct {
	ID int
	// Master is the master's url (meta://host:port), "" when no master is registered.
	Master string
	// Slaves maps slaveId to url.
	Slaves map[int]string
}

// Brokers lists every broker id with its master and slaves, sorted by id.
// Children that are not integers are ignored, as MetaZookeeper.getCluster does.
func (r *Registry) Brokers(ctx context.Context) ([]Broker, error) {
	ids, err := r.Children(ctx, r.paths.BrokerIDs())
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list brokers: %w", err)
	}
	var out []Broker
	for _, s := range ids {
		id, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		kids, err := r.Children(ctx, r.paths.BrokerID(id))
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registry: list broker %d: %w", id, err)
		}
		b := Broker{ID: id, Slaves: map[int]string{}}
		for _, k := range kids {
			slave, ok := ParseBrokerNode(k)
			if !ok {
				continue
			}
			data, _, err := r.Get(ctx, r.paths.BrokerID(id)+"/"+k)
			if errors.Is(err, ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("registry: read broker %d/%s: %w", id, k, err)
			}
			if slave < 0 {
				b.Master = string(data)
			} else {
				b.Slaves[slave] = string(data)
			}
		}
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Tree names one of the three topic trees under <root>/brokers.
type Tree string

// The topic trees (see ZooKeeper layout in broker/wire/doc.go).
const (
	TreeTopics    Tree = "topics"     // value: numPartitions (old clients)
	TreeTopicsPub Tree = "topics-pub" // value: {"numParts":n,"broker":"<id>-m"}
	TreeTopicsSub Tree = "topics-sub"
)

// TopicBroker is one broker's registration of a topic.
type TopicBroker struct {
	// Broker is the node name: <id>-m or <id>-s<n>.
	Broker   string
	BrokerID int
	SlaveID  int // -1 for a master
	NumParts int
}

// Topics lists the topics of a tree (children of <root>/brokers/<tree>), sorted.
func (r *Registry) Topics(ctx context.Context, tree Tree) ([]string, error) {
	kids, err := r.Children(ctx, r.paths.Root+"/brokers/"+string(tree))
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list topics: %w", err)
	}
	sort.Strings(kids)
	return kids, nil
}

// TopicBrokers reads the registrations of a topic in one tree, sorted by
// broker id, masters first. Nodes whose name or value does not parse are skipped.
func (r *Registry) TopicBrokers(ctx context.Context, tree Tree, topic string) ([]TopicBroker, error) {
	dir := r.paths.Root + "/brokers/" + string(tree) + "/" + topic
	kids, err := r.Children(ctx, dir)
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list %s/%s: %w", tree, topic, err)
	}
	var out []TopicBroker
	for _, k := range kids {
		id, slave, ok := ParseBrokerString(k)
		if !ok {
			continue
		}
		data, _, err := r.Get(ctx, dir+"/"+k)
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registry: read %s/%s/%s: %w", tree, topic, k, err)
		}
		n, err := ParseTopicValue(data)
		if err != nil {
			continue
		}
		out = append(out, TopicBroker{Broker: k, BrokerID: id, SlaveID: slave, NumParts: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].BrokerID != out[j].BrokerID {
			return out[i].BrokerID < out[j].BrokerID
		}
		return out[i].SlaveID < out[j].SlaveID
	})
	return out, nil
}

// ParseTopicValue reads a topic node's partition count: either the JSON of
// topics-pub/topics-sub or the plain number of the old topics tree.
func ParseTopicValue(data []byte) (int, error) {
	s := strings.TrimSpace(string(data))
	if strings.HasPrefix(s, "{") {
		var v struct {
			NumParts int    `json:"numParts"`
			Broker   string `json:"broker"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return 0, fmt.Errorf("registry: topic value %q: %w", s, err)
		}
		return v.NumParts, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("registry: topic value %q: %w", s, err)
	}
	return n, nil
}

// Offset is a consumer group's saved position in one partition.
type Offset struct {
	Topic string
	// Partition is the node name, <brokerId>-<partition>.
	Partition string
	BrokerID  int
	Part      int
	// MsgID is the id of the last consumed message, -1 when the offset was
	// moved without consuming or was saved by a client older than 1.4.
	MsgID int64
	// Offset is the next offset to fetch.
	Offset int64
}

// ParseOffset parses a saved offset: "<msgId>-<offset>" split at the last '-'
// (msgId may be negative), or the plain "<offset>" of clients before 1.4
// (msgId -1).
func ParseOffset(s string) (msgID, offset int64, err error) {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '-'); i > 0 {
		msgID, err = strconv.ParseInt(s[:i], 10, 64)
		if err == nil {
			offset, err = strconv.ParseInt(s[i+1:], 10, 64)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("registry: offset %q: %w", s, err)
		}
		return msgID, offset, nil
	}
	offset, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("registry: offset %q: %w", s, err)
	}
	return -1, offset, nil
}

// FormatOffset is the value the Java ZkOffsetStorage writes: <msgId>-<offset>.
func FormatOffset(msgID, offset int64) string {
	return strconv.FormatInt(msgID, 10) + "-" + strconv.FormatInt(offset, 10)
}

// ParsePartition parses "<brokerId>-<partition>".
func ParsePartition(s string) (brokerID, partition int, ok bool) {
	i := strings.IndexByte(s, '-')
	if i <= 0 {
		return 0, 0, false
	}
	b, err1 := strconv.Atoi(s[:i])
	p, err2 := strconv.Atoi(s[i+1:])
	return b, p, err1 == nil && err2 == nil
}

// ConsumerOffsets reads every saved offset of a group, for all its topics
// (topic "" ) or one topic, sorted by topic then broker id then partition.
func (r *Registry) ConsumerOffsets(ctx context.Context, group, topic string) ([]Offset, error) {
	topics := []string{topic}
	if topic == "" {
		var err error
		topics, err = r.Children(ctx, r.paths.Consumers()+"/"+group+"/offsets")
		if errors.Is(err, ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("registry: offsets of group %s: %w", group, err)
		}
	}
	var out []Offset
	for _, t := range topics {
		offs, err := r.topicOffsets(ctx, r.paths.ConsumerOffsets(group, t), t)
		if err != nil {
			return nil, err
		}
		out = append(out, offs...)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.BrokerID != b.BrokerID {
			return a.BrokerID < b.BrokerID
		}
		return a.Part < b.Part
	})
	return out, nil
}

// CommitOffset writes a group's offset for one partition as the Java
// ZkOffsetStorage does (persistent node, <msgId>-<offset>).
func (r *Registry) CommitOffset(ctx context.Context, group, topic string, brokerID, partition int, msgID, offset int64) error {
	path := r.paths.ConsumerOffsets(group, topic) + "/" + strconv.Itoa(brokerID) + "-" + strconv.Itoa(partition)
	if err := r.SetPersistent(ctx, path, []byte(FormatOffset(msgID, offset))); err != nil {
		return fmt.Errorf("registry: commit offset %s: %w", path, err)
	}
	return nil
}

// Groups lists the consumer groups under <root>/consumers, sorted.
func (r *Registry) Groups(ctx context.Context) ([]string, error) {
	kids, err := r.Children(ctx, r.paths.Consumers())
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: list groups: %w", err)
	}
	sort.Strings(kids)
	return kids, nil
}

// topicOffsets reads one topic's offset nodes under dir
// (<root>/consumers/<group>/offsets/<topic>). A missing dir is no offsets;
// unreadable values are logged and left out.
func (r *Registry) topicOffsets(ctx context.Context, dir, topic string) ([]Offset, error) {
	parts, err := r.Children(ctx, dir)
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("registry: offsets %s: %w", dir, err)
	}
	var out []Offset
	for _, p := range parts {
		b, n, ok := ParsePartition(p)
		if !ok {
			continue
		}
		data, _, err := r.Get(ctx, dir+"/"+p)
		if errors.Is(err, ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("registry: offset %s/%s: %w", dir, p, err)
		}
		msgID, off, err := ParseOffset(string(data))
		if err != nil {
			r.log.Warn("REGISTRY: unreadable consumer offset", "path", dir+"/"+p, "value", string(data))
			continue
		}
		out = append(out, Offset{Topic: topic, Partition: p, BrokerID: b, Part: n, MsgID: msgID, Offset: off})
	}
	return out, nil
}
