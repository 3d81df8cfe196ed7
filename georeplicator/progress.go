package georeplicator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"metaq/internal/atomicfile"
	"metaq/internal/clock"
)

// slaveKey identifies one slave of one group.
type slaveKey struct {
	Group   string
	SlaveID int
}

// pkey identifies a partition.
type pkey struct {
	Topic     string
	Partition int
}

type partProgress struct {
	End          int64
	LastProgress time.Time
}

// slaveProgress is what the master knows about one slave. Applied, Durable
// and Parts come from the slave's acks and survive master restarts.
type slaveProgress struct {
	key          slaveKey
	Addr         string
	Connected    bool
	ConnectedAt  time.Time
	FirstSeen    time.Time
	Applied      int64
	Durable      int64
	Sent         int64
	Parts        map[pkey]*partProgress
	LastAck      time.Time
	LastProgress time.Time
	RTT          time.Duration
	Mode         Mode
	LastCodec    Codec
	RawBytes     int64
	WireBytes    int64
	Frames       int64
	Rewinds      int64
	Connects     int64
	Truncated    bool
	Auth         string // how the current or last connection authenticated (authMethod)
}

// progress holds every slave's progress, guarded by mu, and its state file.
type progress struct {
	mu    sync.Mutex
	file  string
	clk   clock.Clock
	m     map[slaveKey]*slaveProgress
	dirty bool
}

type stateFile struct {
	Version int          `json:"version"`
	Slaves  []stateSlave `json:"slaves"`
}

type stateSlave struct {
	Group        string      `json:"group"`
	SlaveID      int         `json:"slaveId"`
	Applied      int64       `json:"applied"`
	Durable      int64       `json:"durable"`
	FirstSeen    time.Time   `json:"firstSeen"`
	LastProgress time.Time   `json:"lastProgress"`
	Parts        []statePart `json:"partitions"`
	Auth         string      `json:"auth,omitempty"`
}

type statePart struct {
	Topic        string    `json:"topic"`
	Partition    int       `json:"partition"`
	End          int64     `json:"end"`
	LastProgress time.Time `json:"lastProgress"`
}

func loadProgress(file string, clk clock.Clock) (*progress, error) {
	p := &progress{file: file, clk: clk, m: map[slaveKey]*slaveProgress{}}
	if file == "" {
		return p, nil
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("georeplicator: read state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("georeplicator: parse state %s: %w", file, err)
	}
	for _, s := range st.Slaves {
		sp := &slaveProgress{key: slaveKey{s.Group, s.SlaveID}, Applied: s.Applied, Durable: s.Durable,
			FirstSeen: s.FirstSeen, LastProgress: s.LastProgress, Parts: map[pkey]*partProgress{}, Auth: s.Auth}
		for _, pp := range s.Parts {
			sp.Parts[pkey{pp.Topic, pp.Partition}] = &partProgress{End: pp.End, LastProgress: pp.LastProgress}
		}
		p.m[sp.key] = sp
	}
	return p, nil
}

func (p *progress) getLocked(k slaveKey) *slaveProgress {
	sp := p.m[k]
	if sp == nil {
		now := p.clk.Now()
		sp = &slaveProgress{key: k, Parts: map[pkey]*partProgress{}, FirstSeen: now, LastProgress: now, Applied: -1, Durable: -1}
		p.m[k] = sp
		p.dirty = true
	}
	return sp
}

// connect records a new connection of slave k and returns its number;
// disconnect with an older number (a connection the slave replaced) leaves
// the slave connected.
func (p *progress) connect(k slaveKey, addr string, start int64, truncated bool, m Mode) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.getLocked(k)
	sp.Addr, sp.Connected, sp.ConnectedAt = addr, true, p.clk.Now()
	sp.Sent, sp.Mode, sp.Truncated = start, m, truncated
	sp.Connects++
	if sp.Applied < 0 {
		sp.Applied = start
	}
	return sp.Connects
}

func (p *progress) disconnect(k slaveKey, conn int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sp := p.m[k]; sp != nil && sp.Connects == conn {
		sp.Connected = false
	}
}

func (p *progress) sent(k slaveKey, end int64, raw, wire int, c Codec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.getLocked(k)
	sp.Sent = end
	sp.RawBytes += int64(raw)
	sp.WireBytes += int64(wire)
	sp.Frames++
	sp.LastCodec = c
}

func (p *progress) corrupt(k slaveKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.getLocked(k).Rewinds++
}

func (p *progress) ack(k slaveKey, a ack, rtt time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.getLocked(k)
	now := p.clk.Now()
	sp.LastAck = now
	sp.RTT = rtt
	if a.Applied != sp.Applied {
		sp.Applied = a.Applied
		sp.LastProgress = now
		p.dirty = true
	}
	if a.Durable != sp.Durable {
		sp.Durable = a.Durable
		p.dirty = true
	}
	for _, pe := range a.Parts {
		key := pkey{pe.Topic, pe.Partition}
		pp := sp.Parts[key]
		if pp == nil {
			sp.Parts[key] = &partProgress{End: pe.End, LastProgress: now}
			p.dirty = true
		} else if pp.End != pe.End {
			pp.End, pp.LastProgress = pe.End, now
			p.dirty = true
		}
	}
}

func (p *progress) saveIfDirty() error {
	p.mu.Lock()
	d := p.dirty
	p.mu.Unlock()
	if !d {
		return nil
	}
	return p.save()
}

// save writes the state file atomically: temp file, fsync, rename, fsync dir.
func (p *progress) save() error {
	if p.file == "" {
		return nil
	}
	p.mu.Lock()
	st := stateFile{Version: 1}
	for _, sp := range p.m {
		ss := stateSlave{Group: sp.key.Group, SlaveID: sp.key.SlaveID, Applied: sp.Applied, Durable: sp.Durable,
			FirstSeen: sp.FirstSeen, LastProgress: sp.LastProgress, Auth: sp.Auth}
		for k, pp := range sp.Parts {
			ss.Parts = append(ss.Parts, statePart{Topic: k.Topic, Partition: k.Partition, End: pp.End, LastProgress: pp.LastProgress})
		}
		sort.Slice(ss.Parts, func(i, j int) bool {
			return lessKey(pkey{ss.Parts[i].Topic, ss.Parts[i].Partition}, pkey{ss.Parts[j].Topic, ss.Parts[j].Partition})
		})
		st.Slaves = append(st.Slaves, ss)
	}
	p.dirty = false
	p.mu.Unlock()
	sort.Slice(st.Slaves, func(i, j int) bool {
		a, b := st.Slaves[i], st.Slaves[j]
		return a.Group < b.Group || a.Group == b.Group && a.SlaveID < b.SlaveID
	})
	data, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return fmt.Errorf("georeplicator: encode state: %w", err)
	}
	if err := writeFileAtomic(p.file, data); err != nil {
		p.mu.Lock()
		p.dirty = true
		p.mu.Unlock()
		return fmt.Errorf("georeplicator: save state: %w", err)
	}
	return nil
}

func lessKey(a, b pkey) bool {
	return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
}

// writeFileAtomic replaces path with data (see internal/atomicfile),
// creating its directory first.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, 0o644)
}
