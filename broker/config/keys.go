package config

import "strings"

// Key names exactly as MetaQ spells them (see Configuration in broker/wire/doc.go), plus the keys of
// this project's optional sections. Order here is the order Describe prints.

const (
	sectionSystem      = "system"
	sectionZooKeeper   = "zookeeper"
	sectionSite        = "site"
	sectionGossip      = "gossip"
	sectionNATS        = "nats"
	sectionReplication = "replication"
	sectionLimits      = "limits"
	topicPrefix        = "topic="
	// sectionSlaveInert is the [slave] section of older MetaQ files (MetaQ's
	// own test resources carry it); MetaQ 1.4.6 ignores it.
	sectionSlaveInert = "slave"
	filterKeyPrefix   = "group."
)

// knownSections are the sections a server.ini may hold besides [topic=<name>].
var knownSections = []string{
	sectionSystem, sectionZooKeeper, sectionSite, sectionGossip, sectionNATS, sectionReplication, sectionLimits,
}

// closestSection suggests the known section nearest to name: a topic section
// when name has the "<word>=<topic>" shape ([topics=t], [topic =t]), the
// nearest named section otherwise.
func closestSection(name string) string {
	if _, topic, ok := strings.Cut(name, "="); ok {
		return topicPrefix + strings.TrimSpace(topic)
	}
	return closest(knownSections, name)
}

// systemKeys are the [system] keys MetaQ reads (MetaConfig.populateSystemConf).
var systemKeys = []string{
	"brokerId", "hostName", "serverPort", "dashboardHttpPort", "dataPath", "dataLogPath", "appClassPath",
	"numPartitions", "unflushThreshold", "unflushInterval", "maxSegmentSize", "maxTransferSize",
	"getProcessThreadCount", "putProcessThreadCount", "deletePolicy", "deleteWhen", "quartzThreadCount",
	"maxCheckpoints", "checkpointInterval", "maxTxTimeoutTimerCapacity", "flushTxLogAtCommit",
	"maxTxTimeoutInSeconds", "acceptPublish", "acceptSubscribe", "stat", "updateConsumerOffsets",
	"loadMessageStoresInParallel",
}

// systemRequiredKeys must be present and non-blank: MetaQ reads them with
// getInt(section, key), which throws on a blank value.
var systemRequiredKeys = []string{
	"brokerId", "numPartitions", "unflushThreshold", "unflushInterval", "maxSegmentSize", "maxTransferSize",
}

// systemInertKeys are other field names of the Java MetaConfig class. MetaQ's
// key check (Config.getFieldSet) accepts every lower-case field name, but the
// parser never reads these, so they have no effect. We accept them with a
// warning so a file MetaQ loads still loads.
var systemInertKeys = []string{
	"topics", "slaveConfig", "zkConfig", "topicConfigMap", "propertyChangeSupport", "lastModified", "path",
	"configFileChecksum", "closedPartitionMap", "serialVersionUID", "log",
}

// zkKeys are the [zookeeper] keys (ZkUtils.ZKConfig @Key names).
var zkKeys = []string{
	"zk.zkConnect", "zk.zkSessionTimeoutMs", "zk.zkConnectionTimeoutMs", "zk.zkSyncTimeMs", "zk.zkEnable", "zk.zkRoot",
}

// topicKeys are the [topic=...] keys (TopicConfig fields read by
// MetaConfig.populateTopicsConfig); group.<name> keys are handled apart.
var topicKeys = []string{
	"numPartitions", "unflushThreshold", "unflushInterval", "dataPath", "deletePolicy", "deleteWhen",
	"acceptPublish", "acceptSubscribe", "stat",
	// This project's: synchronous cross-site replication.
	"minSyncSites", "syncDegrade",
	// This project's: puts at a slave site carried to the master (gateway).
	"forwardPuts",
	// This project's: forwarded puts answered from the site's outbox.
	"storeAndForward",
}

// topicInertKeys are TopicConfig field names MetaQ accepts but never reads.
var topicInertKeys = []string{"topic", "filterClassNames"}

var siteKeys = []string{"name", "dashboardAddr", "adminAddr", "token", "overlay", "forwardPuts", "storeAndForward", "outboxMaxBytes", "outboxMaxAgeMs", "forwardMaxInFlightBytes"}
var gossipKeys = []string{"enable", "bind", "advertise", "join", "key", "label", "probeIntervalMs"}
var natsKeys = []string{"url", "embeddedListen", "credsFile", "tlsCert", "tlsKey", "tlsCA", "bucket", "subject", "agent", "trustedKeys", "allowUnsigned"}
var limitsKeys = []string{
	"maxConnections", "maxConnectionsPerAddress", "idleTimeoutMs", "readTimeoutMs", "writeTimeoutMs",
	"maxBufferedBytes", "maxAddressBufferedBytes", "maxConnectionBufferedBytes", "getWaitMs",
	"getWaitMinBytes", "getWaitLingerMs", "tcpCongestion",
}
var replicationKeys = []string{"enable", "listen", "advertise", "compression", "bandwidthBytesPerSec", "stuckAfterMs", "tlsCert", "tlsKey", "tlsCA", "fenceSites", "leaseMs", "secretFile", "autoFailover", "autoFailoverAfterMs", "handoverHoldMs", "handoverHoldBytes", "handoverHoldMaxMs", "allowUnauthenticatedSwitchover", "promoteFinishTimeoutMs", "sites"}

// slaveKeys are the async_slave.properties keys MetaQ reads
// (MetamorphosisSlaveBroker.putSlaveProperties) followed by this project's.
var slaveKeys = []string{
	"slaveId", "slaveGroup", "slaveMaxDelayInMills", "autoSyncMasterConfig",
	"masterAddress", "compression", "bandwidthBytesPerSec", "tlsCert", "tlsKey", "tlsCA",
}

// compressions are the codec names the replication link understands.
var compressions = []string{"zstd", "s2", "none", "auto"}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the entry of valid nearest to key by edit distance, as
// MetaQ's Config.findBestMatchField does for its "do you mean" hint.
func closest(valid []string, key string) string {
	best, bestDist := "", -1
	for _, v := range valid {
		if d := levenshtein(key, v); bestDist < 0 || d < bestDist {
			best, bestDist = v, d
		}
	}
	return best
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
