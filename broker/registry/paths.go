package registry

import (
	"net"
	"strconv"
	"strings"
)

// NormalizeRoot returns root with a leading '/' and no trailing '/', as
// MetaZookeeper does; "" becomes "/meta".
func NormalizeRoot(root string) string {
	root = strings.TrimSpace(root)
	if root == "" {
		root = "/meta"
	}
	if !strings.HasPrefix(root, "/") {
		root = "/" + root
	}
	for len(root) > 1 && strings.HasSuffix(root, "/") {
		root = strings.TrimSuffix(root, "/")
	}
	if root == "/" {
		// A root of "/" would give paths like "//brokers"; MetaQ has the same
		// trimming and ends up with "" as the prefix.
		return ""
	}
	return root
}

// Paths builds the znode paths of MetaQ's layout under one root (see ZooKeeper layout in broker/wire/doc.go).
type Paths struct {
	// Root is the normalised zk.zkRoot (see NormalizeRoot).
	Root string
}

// BrokerIDs is <root>/brokers/ids.
func (p Paths) BrokerIDs() string { return p.Root + "/brokers/ids" }

// BrokerID is <root>/brokers/ids/<id>.
func (p Paths) BrokerID(id int) string { return p.BrokerIDs() + "/" + strconv.Itoa(id) }

// Broker is <root>/brokers/ids/<id>/master, or .../slave<n> when slaveID >= 0.
func (p Paths) Broker(id, slaveID int) string {
	if slaveID < 0 {
		return p.BrokerID(id) + "/master"
	}
	return p.BrokerID(id) + "/slave" + strconv.Itoa(slaveID)
}

// ParseBrokerNode reads a child name of ids/<id>: "master" gives -1,
// "slave<n>" gives n; any other name (master_config_checksum, a stray
// node) gives ok false.
func ParseBrokerNode(name string) (slaveID int, ok bool) {
	if name == "master" {
		return -1, true
	}
	rest, found := strings.CutPrefix(name, "slave")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, false
	}
	return n, true
}

// MasterConfigChecksum is <root>/brokers/ids/<id>/master_config_checksum.
func (p Paths) MasterConfigChecksum(id int) string {
	return p.BrokerID(id) + "/master_config_checksum"
}

// Topics is <root>/brokers/topics (the deprecated tree read by old and contrib clients).
func (p Paths) Topics() string { return p.Root + "/brokers/topics" }

// TopicsPub is <root>/brokers/topics-pub, read by producers.
func (p Paths) TopicsPub() string { return p.Root + "/brokers/topics-pub" }

// TopicsSub is <root>/brokers/topics-sub, read by consumers.
func (p Paths) TopicsSub() string { return p.Root + "/brokers/topics-sub" }

// Consumers is <root>/consumers.
func (p Paths) Consumers() string { return p.Root + "/consumers" }

// ConsumerIDs is <root>/consumers/<group>/ids.
func (p Paths) ConsumerIDs(group string) string { return p.Consumers() + "/" + group + "/ids" }

// ConsumerOwners is <root>/consumers/<group>/owners/<topic>.
func (p Paths) ConsumerOwners(group, topic string) string {
	return p.Consumers() + "/" + group + "/owners/" + topic
}

// ConsumerOffsets is <root>/consumers/<group>/offsets/<topic>.
func (p Paths) ConsumerOffsets(group, topic string) string {
	return p.Consumers() + "/" + group + "/offsets/" + topic
}

// BrokerString is the name a broker's topic nodes carry: "<id>-m" for a
// master, "<id>-s<n>" for slave n.
func BrokerString(id, slaveID int) string {
	if slaveID < 0 {
		return strconv.Itoa(id) + "-m"
	}
	return strconv.Itoa(id) + "-s" + strconv.Itoa(slaveID)
}

// ParseBrokerString parses "<id>-m" (slaveID -1) or "<id>-s<n>".
func ParseBrokerString(s string) (id, slaveID int, ok bool) {
	i := strings.IndexByte(s, '-')
	if i <= 0 {
		return 0, 0, false
	}
	id, err := strconv.Atoi(s[:i])
	if err != nil {
		return 0, 0, false
	}
	switch rest := s[i+1:]; {
	case rest == "m":
		return id, -1, true
	case strings.HasPrefix(rest, "s"):
		n, err := strconv.Atoi(rest[1:])
		if err != nil || n < 0 {
			return 0, 0, false
		}
		return id, n, true
	}
	return 0, 0, false
}

// BrokerURL is the value of a broker node: meta://<host>:<port>.
func BrokerURL(host string, port int) string {
	// An IPv6 literal gets its brackets here (whether or not it came with them).
	return "meta://" + net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), strconv.Itoa(port))
}

// TopicJSON is the value of a topics-pub/topics-sub node. Java clients parse
// it with Jackson 1.x, which fails on unknown properties, so it holds exactly
// these two fields.
func TopicJSON(numParts int, broker string) string {
	return `{"numParts":` + strconv.Itoa(numParts) + `,"broker":"` + broker + `"}`
}
