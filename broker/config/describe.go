package config

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// entry is one effective key=value, in the file's own spelling and units.
type entry struct {
	Key, Value string
}

type block struct {
	Section string
	Entries []entry
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
func itoa(n int) string         { return strconv.Itoa(n) }
func btoa(b bool) string        { return strconv.FormatBool(b) }

// blocks lists the effective configuration, every key with its default
// filled in, section by section. Describe prints it and Diff compares it, so
// "changed" always means "prints differently".
func (s *Server) blocks() []block {
	sys := s.System
	out := []block{{sectionSystem, []entry{
		{"brokerId", itoa(sys.BrokerID)},
		{"hostName", sys.HostName},
		{"serverPort", itoa(sys.ServerPort)},
		{"dashboardHttpPort", itoa(sys.DashboardHTTPPort)},
		{"dataPath", sys.DataPath},
		{"dataLogPath", sys.DataLogPath},
		{"appClassPath", sys.AppClassPath},
		{"numPartitions", itoa(sys.NumPartitions)},
		{"unflushThreshold", itoa(sys.UnflushThreshold)},
		{"unflushInterval", ms(sys.UnflushInterval)},
		{"maxSegmentSize", strconv.FormatInt(sys.MaxSegmentSize, 10)},
		{"maxTransferSize", itoa(sys.MaxTransferSize)},
		{"getProcessThreadCount", itoa(sys.GetProcessThreadCount)},
		{"putProcessThreadCount", itoa(sys.PutProcessThreadCount)},
		{"deletePolicy", sys.DeletePolicy.Text},
		{"deleteWhen", sys.DeleteWhen.Text},
		{"quartzThreadCount", itoa(sys.QuartzThreadCount)},
		{"maxCheckpoints", itoa(sys.MaxCheckpoints)},
		{"checkpointInterval", ms(sys.CheckpointInterval)},
		{"maxTxTimeoutTimerCapacity", itoa(sys.MaxTxTimeoutTimerCapacity)},
		{"flushTxLogAtCommit", itoa(sys.FlushTxLogAtCommit)},
		{"maxTxTimeoutInSeconds", itoa(sys.MaxTxTimeoutInSeconds)},
		{"acceptPublish", btoa(sys.AcceptPublish)},
		{"acceptSubscribe", btoa(sys.AcceptSubscribe)},
		{"stat", btoa(sys.Stat)},
		{"updateConsumerOffsets", btoa(sys.UpdateConsumerOffsets)},
		{"loadMessageStoresInParallel", btoa(sys.LoadMessageStoresInParallel)},
	}}}
	zk := s.ZooKeeper
	out = append(out, block{sectionZooKeeper, []entry{
		{"zk.zkConnect", zk.Connect},
		{"zk.zkSessionTimeoutMs", ms(zk.SessionTimeout)},
		{"zk.zkConnectionTimeoutMs", ms(zk.ConnectionTimeout)},
		{"zk.zkSyncTimeMs", ms(zk.SyncTime)},
		{"zk.zkEnable", btoa(zk.Enable)},
		{"zk.zkRoot", zk.Root},
	}})
	for _, t := range s.Topics {
		out = append(out, block{topicPrefix + t.Name, topicEntries(t)})
	}
	key := ""
	if len(s.Gossip.Key) > 0 {
		key = base64.StdEncoding.EncodeToString(s.Gossip.Key)
	}
	out = append(out,
		block{sectionSite, []entry{
			{"name", s.Site.Name},
			{"dashboardAddr", s.Site.DashboardAddr},
			{"adminAddr", s.Site.AdminAddr},
			{"token", s.Site.Token},
			{"overlay", s.Site.Overlay},
		}},
		block{sectionGossip, []entry{
			{"enable", btoa(s.Gossip.Enable)},
			{"bind", s.Gossip.Bind},
			{"advertise", s.Gossip.Advertise},
			{"join", strings.Join(s.Gossip.Join, ",")},
			{"key", key},
			{"label", s.Gossip.Label},
			{"probeIntervalMs", ms(s.Gossip.ProbeInterval)},
		}},
		block{sectionNATS, []entry{
			{"url", s.NATS.URL},
			{"embeddedListen", s.NATS.EmbeddedListen},
			{"credsFile", s.NATS.CredsFile},
			{"tlsCert", s.NATS.TLSCert},
			{"tlsKey", s.NATS.TLSKey},
			{"tlsCA", s.NATS.TLSCA},
			{"bucket", s.NATS.Bucket},
			{"subject", s.NATS.Subject},
			{"agent", s.NATS.Agent},
			{"trustedKeys", s.NATS.TrustedKeys},
			{"allowUnsigned", btoa(s.NATS.AllowUnsigned)},
		}},
		block{sectionReplication, []entry{
			{"enable", strconv.FormatBool(s.Replication.Enable)},
			{"listen", s.Replication.Listen},
			{"advertise", s.Replication.Advertise},
			{"compression", s.Replication.Compression},
			{"bandwidthBytesPerSec", strconv.FormatInt(s.Replication.BandwidthBytesPerSec, 10)},
			{"stuckAfterMs", ms(s.Replication.StuckAfter)},
			{"tlsCert", s.Replication.TLSCert},
			{"tlsKey", s.Replication.TLSKey},
			{"tlsCA", s.Replication.TLSCA},
			{"fenceSites", itoa(s.Replication.FenceSites)},
			{"leaseMs", ms(s.Replication.Lease)},
			{"secretFile", s.Replication.SecretFile},
			{"autoFailover", btoa(s.Replication.AutoFailover)},
			{"autoFailoverAfterMs", ms(s.Replication.AutoFailoverAfter)},
			{"handoverHoldMs", ms(s.Replication.HandoverHold)},
			{"promoteFinishTimeoutMs", ms(s.Replication.PromoteFinishTimeout)},
			{"handoverHoldBytes", strconv.FormatInt(s.Replication.HandoverHoldBytes, 10)},
			{"handoverHoldMaxMs", ms(s.Replication.HandoverHoldMax)},
			{"allowUnauthenticatedSwitchover", btoa(s.Replication.AllowUnauthenticatedSwitchover)},
			{"sites", strings.Join(s.Replication.Sites, ",")},
		}},
		block{sectionLimits, []entry{
			{"maxConnections", itoa(s.Limits.MaxConnections)},
			{"maxConnectionsPerAddress", itoa(s.Limits.MaxConnectionsPerAddress)},
			{"idleTimeoutMs", ms(s.Limits.IdleTimeout)},
			{"readTimeoutMs", ms(s.Limits.ReadTimeout)},
			{"writeTimeoutMs", ms(s.Limits.WriteTimeout)},
			{"maxBufferedBytes", strconv.FormatInt(s.Limits.MaxBufferedBytes, 10)},
			{"maxAddressBufferedBytes", strconv.FormatInt(s.Limits.addressBufferedBytes(), 10)},
			{"maxConnectionBufferedBytes", strconv.FormatInt(s.Limits.MaxConnectionBufferedBytes, 10)},
			{"getWaitMs", ms(s.Limits.GetWait)},
			{"getWaitMinBytes", strconv.FormatInt(s.Limits.GetWaitMinBytes, 10)},
			{"getWaitLingerMs", ms(s.Limits.GetWaitLinger)},
			{"tcpCongestion", cmp.Or(s.Limits.TCPCongestion, "host")},
		}},
	)
	return out
}

func topicEntries(t Topic) []entry {
	es := []entry{
		{"numPartitions", itoa(t.NumPartitions)},
		{"unflushThreshold", itoa(t.UnflushThreshold)},
		{"unflushInterval", ms(t.UnflushInterval)},
		{"dataPath", t.DataPath},
		{"deletePolicy", t.DeletePolicy.Text},
		{"deleteWhen", t.DeleteWhen.Text},
		{"acceptPublish", btoa(t.AcceptPublish)},
		{"acceptSubscribe", btoa(t.AcceptSubscribe)},
		{"stat", btoa(t.Stat)},
	}
	if t.MinSyncSites > 0 || t.SyncDegrade == SyncDegradeAsync {
		// Only when set, so a MetaQ file describes as MetaQ keys alone.
		es = append(es, entry{"minSyncSites", itoa(t.MinSyncSites)}, entry{"syncDegrade", t.SyncDegrade})
	}
	if t.ForwardPuts != ForwardUnset {
		es = append(es, entry{"forwardPuts", btoa(t.ForwardPuts == ForwardOn)})
	}
	if t.StoreAndForward != ForwardUnset {
		es = append(es, entry{"storeAndForward", btoa(t.StoreAndForward == ForwardOn)})
	}
	groups := make([]string, 0, len(t.Filters))
	for g := range t.Filters {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		es = append(es, entry{filterKeyPrefix + g, t.Filters[g]})
	}
	return es
}

func (sl *Slave) entries() []entry {
	return []entry{
		{"slaveId", itoa(sl.SlaveID)},
		{"slaveGroup", sl.SlaveGroup},
		{"slaveMaxDelayInMills", ms(sl.SlaveMaxDelay)},
		{"autoSyncMasterConfig", btoa(sl.AutoSyncMasterConfig)},
		{"masterAddress", sl.MasterAddress},
		{"compression", sl.Compression},
		{"bandwidthBytesPerSec", strconv.FormatInt(sl.BandwidthBytesPerSec, 10)},
		{"tlsCert", sl.TLSCert},
		{"tlsKey", sl.TLSKey},
		{"tlsCA", sl.TLSCA},
	}
}

// Describe prints the effective configuration, every key with its default
// filled in and every topic with the [system] values it inherits, in
// server.ini syntax (so the output itself loads). The [site] token is
// masked. slave may be nil; otherwise its keys follow as comment lines in
// async_slave.properties syntax. `metaq-server check` prints this.
func Describe(w io.Writer, s *Server, slave *Slave) error {
	var b strings.Builder
	fmt.Fprintf(&b, "; effective configuration of %s (crc32 %d)\n", nameOr(s.File), s.Checksum)
	for i, bl := range s.blocks() {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[%s]\n", bl.Section)
		for _, e := range bl.Entries {
			v := e.Value
			if bl.Section == sectionSite && e.Key == "token" && v != "" {
				v = "********"
			}
			if bl.Section == sectionGossip && e.Key == "key" && v != "" {
				v = "********"
			}
			fmt.Fprintf(&b, "%s=%s\n", e.Key, v)
		}
	}
	if slave != nil {
		fmt.Fprintf(&b, "\n; effective async slave configuration of %s\n", nameOr(slave.File))
		for _, e := range slave.entries() {
			fmt.Fprintf(&b, "; %s=%s\n", e.Key, e.Value)
		}
	}
	_, err := io.WriteString(w, b.String())
	if err != nil {
		return fmt.Errorf("config: describe: %w", err)
	}
	return nil
}

func nameOr(file string) string {
	if file == "" {
		return "<bytes>"
	}
	return file
}

// addressBufferedBytes is MaxAddressBufferedBytes with its default applied.
func (l Limits) addressBufferedBytes() int64 {
	if l.MaxAddressBufferedBytes > 0 {
		return l.MaxAddressBufferedBytes
	}
	return min(max(l.MaxBufferedBytes/2, l.MaxConnectionBufferedBytes), l.MaxBufferedBytes)
}
