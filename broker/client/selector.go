package client

import (
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

// ErrNoPartition is returned when a topic has no partition to send to, or
// when the Ordered selector's partition for a key is not available (the
// message must wait rather than move, or order would break).
var ErrNoPartition = errors.New("client: no partition available")

// Selector picks the partition a message goes to. partitions is sorted by
// (broker id, partition) and is never empty; Select must be safe for
// concurrent use and must not keep the slice.
type Selector interface {
	Select(topic string, partitions []Partition, m *Message) (Partition, error)
}

// RoundRobin is MetaQ's default RoundRobinPartitionSelector: one counter per
// selector, incremented before use, so the first message goes to index 1.
type RoundRobin struct{ n atomic.Int64 }

// Select implements Selector.
func (r *RoundRobin) Select(_ string, ps []Partition, _ *Message) (Partition, error) {
	v := r.n.Add(1) & 0x7FFFFFFF // PositiveAtomicCounter
	return ps[int(v%int64(len(ps)))], nil
}

// Random picks a partition uniformly at random.
type Random struct{}

// Select implements Selector.
func (Random) Select(_ string, ps []Partition, _ *Message) (Partition, error) {
	return ps[rand.IntN(len(ps))], nil
}

// KeyHash sends messages with the same Key to the same partition while the
// partition list does not change (FNV-1a of the key modulo the count). A
// message without a key goes to a random partition.
type KeyHash struct{}

// Select implements Selector.
func (KeyHash) Select(_ string, ps []Partition, m *Message) (Partition, error) {
	if len(m.Key) == 0 {
		return ps[rand.IntN(len(ps))], nil
	}
	h := fnv.New32a()
	h.Write(m.Key)
	return ps[int(h.Sum32()%uint32(len(ps)))], nil
}

// Ordered keeps each key on the partition it was first sent to, even when
// partitions are added: the partition is chosen by KeyHash the first time
// and remembered. When that partition disappears from ZooKeeper, Select
// fails with ErrNoPartition instead of moving the key (as MetaQ's
// OrderedMessagePartitionSelector does), so per-key order holds; the caller
// retries later. The memory holds at most MaxKeys keys (default 1<<20);
// beyond that the oldest keys are forgotten.
type Ordered struct {
	MaxKeys int

	mu    sync.Mutex
	keys  map[string]Partition
	order []string
}

// Select implements Selector.
func (o *Ordered) Select(topic string, ps []Partition, m *Message) (Partition, error) {
	if len(m.Key) == 0 {
		return Partition{}, errors.New("client: ordered selector needs a message key")
	}
	k := topic + "\x00" + string(m.Key)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.keys == nil {
		o.keys = make(map[string]Partition)
	}
	if p, ok := o.keys[k]; ok {
		for _, q := range ps {
			if q == p {
				return p, nil
			}
		}
		return Partition{}, ErrNoPartition
	}
	p, _ := KeyHash{}.Select(topic, ps, m)
	o.keys[k] = p
	o.order = append(o.order, k)
	maxKeys := o.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 1 << 20
	}
	for len(o.order) > maxKeys {
		delete(o.keys, o.order[0])
		o.order = o.order[1:]
	}
	return p, nil
}
