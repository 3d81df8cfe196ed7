package client

import (
	"crypto/md5"
	"math/rand/v2"
	"sort"
	"strconv"
)

// Strategy is how a consumer group splits a topic's partitions (MetaQ's
// loadBalanceStrategyType).
type Strategy int

const (
	// StrategyDefault is DefaultLoadBalanceStrategy: contiguous ranges of
	// the string-sorted partition list by consumer position.
	StrategyDefault Strategy = iota
	// StrategyConsist is ConsisHashStrategy: a ketama MD5 ring with 160
	// points per consumer.
	StrategyConsist
)

// String returns "DEFAULT" or "CONSIST" as MetaQ names them.
func (s Strategy) String() string {
	if s == StrategyConsist {
		return "CONSIST"
	}
	return "DEFAULT"
}

// Assign returns the partitions consumer gets among consumers, exactly as
// the Java client computes them. consumers and partitions must be sorted as
// strings, as the Java client sorts them (Assign sorts copies to be safe).
// consumer is a consumerIdString: "<group>_<consumerId>".
func Assign(s Strategy, consumer string, consumers, partitions []string) []string {
	cs := append([]string(nil), consumers...)
	ps := append([]string(nil), partitions...)
	sort.Strings(cs)
	sort.Strings(ps)
	if s == StrategyConsist {
		return assignConsist(consumer, cs, ps)
	}
	return assignDefault(consumer, cs, ps)
}

func assignDefault(consumer string, consumers, partitions []string) []string {
	if len(consumers) == 0 {
		return nil
	}
	per := len(partitions) / len(consumers)
	extra := len(partitions) % len(consumers)
	pos := -1
	for i, c := range consumers {
		if c == consumer {
			pos = i
			break
		}
	}
	if pos < 0 {
		return nil
	}
	start := per*pos + min(pos, extra)
	n := per
	if pos+1 <= extra {
		n++
	}
	if n <= 0 {
		return nil
	}
	return append([]string(nil), partitions[start:start+n]...)
}

// ketamaPoint is one point on the ring.
type ketamaPoint struct {
	hash     uint32
	consumer string
}

// ketamaHash is HashAlgorithm.KETAMA_HASH: the first four MD5 bytes, little
// endian, as an unsigned 32-bit value.
func ketamaHash(s string) uint32 {
	d := md5.Sum([]byte(s))
	return uint32(d[3])<<24 | uint32(d[2])<<16 | uint32(d[1])<<8 | uint32(d[0])
}

func buildRing(consumers []string) []ketamaPoint {
	// A Java TreeMap keyed by hash: a later consumer overwrites an earlier
	// one's point on a collision, so insert in list order and keep the last.
	byHash := make(map[uint32]string, len(consumers)*160)
	for _, c := range consumers {
		for i := 0; i < 160/4; i++ {
			d := md5.Sum([]byte(c + "-" + strconv.Itoa(i)))
			for h := 0; h < 4; h++ {
				k := uint32(d[3+h*4])<<24 | uint32(d[2+h*4])<<16 | uint32(d[1+h*4])<<8 | uint32(d[h*4])
				byHash[k] = c
			}
		}
	}
	ring := make([]ketamaPoint, 0, len(byHash))
	for h, c := range byHash {
		ring = append(ring, ketamaPoint{h, c})
	}
	sort.Slice(ring, func(i, j int) bool { return ring[i].hash < ring[j].hash })
	return ring
}

func ringOwner(ring []ketamaPoint, key string) string {
	if len(ring) == 0 {
		return ""
	}
	h := ketamaHash(key)
	i := sort.Search(len(ring), func(i int) bool { return ring[i].hash >= h })
	if i == len(ring) {
		i = 0
	}
	return ring[i].consumer
}

func assignConsist(consumer string, consumers, partitions []string) []string {
	ring := buildRing(consumers)
	var out []string
	for _, p := range partitions {
		if ringOwner(ring, p) == consumer {
			out = append(out, p)
		}
	}
	return out
}

// pickReplica is Cluster.getBrokerRandom: the master if there is one,
// otherwise a random slave.
func pickReplica(reps []Replica) (Replica, bool) {
	if len(reps) == 0 {
		return Replica{}, false
	}
	for _, r := range reps {
		if r.Master {
			return r, true
		}
	}
	return reps[rand.IntN(len(reps))], true
}
