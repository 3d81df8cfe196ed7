package georeplicator

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"time"
)

// Identity is what a site's data directory knows about mastership of its
// brokerId (<dataPath>/replication/identity.json):
//
//   - LogID names this site's own commit log. Log positions mean something
//     only within one log; a slave that connects to a master with another
//     LogID than the one its checkpoint refers to (after a failover) resumes
//     by its partition ends instead (partition offsets are the same on every
//     site).
//   - Generation is the highest master generation this site has seen. Every
//     change of master raises it; a master that learns of a newer one stops
//     acknowledging writes and steps down.
//   - Ends, when this site became master, are each partition's end at that
//     moment (what the new master had). A former master that rejoins cuts
//     everything beyond them (the unreplicated tail) and saves it aside.
//   - History is the history of this site's log: the epoch of every
//     generation whose records it holds (Epoch: the generation and the
//     partition ends its master was promoted with), oldest first. A
//     promotion appends its own epoch; a slave takes its master's history
//     once it follows it (cut where the two forked). A rejoining site is
//     cut at the earliest fork of its history and the new master's, which
//     may lie generations back.
//   - Role, once a promotion or a demotion changed this site's role at run
//     time, is that role: it overrides the role the site is started in, so
//     that a restart with the unchanged configuration comes back as what
//     the site last was (never as a second master).
type Identity struct {
	LogID      string           `json:"logId"`
	Generation uint64           `json:"generation"`
	Ends       map[string]int64 `json:"promotionEnds,omitempty"` // "topic-partition" -> end
	History    []Epoch          `json:"history,omitempty"`
	Role       *Role            `json:"role,omitempty"`
}

// Roles a site can take at run time (Role.Name).
const (
	RoleMaster = "master"
	RoleSlave  = "slave"
)

// Role is the role a site took at run time.
type Role struct {
	Name string `json:"name"` // RoleMaster or RoleSlave
	// Generation is the master generation when the role was taken: the one
	// this site won (master) or the one it follows (slave).
	Generation uint64    `json:"generation"`
	Since      time.Time `json:"since"`
	// A slave's async_slave.properties keys: slaveId, slaveGroup and, with
	// ZooKeeper off, the master's replication address when it was demoted.
	SlaveID       int    `json:"slaveId,omitempty"`
	SlaveGroup    string `json:"slaveGroup,omitempty"`
	MasterAddress string `json:"masterAddress,omitempty"`
}

// IdentityStore keeps a site's Identity in a file, written atomically on
// every change. Safe for concurrent use.
type IdentityStore struct {
	file string
	mu   sync.Mutex
	id   Identity
}

// OpenIdentity reads file, creating it with a fresh LogID and generation 0
// when it does not exist.
func OpenIdentity(file string) (*IdentityStore, error) {
	s := &IdentityStore{file: file}
	data, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.id = Identity{LogID: newLogID()}
		if err := s.saveLocked(); err != nil {
			return nil, err
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("georeplicator: read identity: %w", err)
	}
	if err := json.Unmarshal(data, &s.id); err != nil {
		return nil, fmt.Errorf("georeplicator: parse identity %s: %w", file, err)
	}
	if s.id.LogID == "" {
		return nil, fmt.Errorf("georeplicator: identity %s has no logId", file)
	}
	if s.id.History == nil && s.id.Ends != nil && s.id.Role != nil && s.id.Role.Name == RoleMaster {
		// Written before histories were kept: a master knows its own epoch.
		// Elsewhere the history is unknown, and an empty one makes a
		// rejoining site cut at the earliest epoch of the master's history
		// (it saves aside, and then receives again, what it shares beyond).
		s.id.History = []Epoch{{Generation: s.id.Role.Generation, Ends: s.id.Ends}}
	}
	return s, nil
}

func newLogID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Get returns a copy of the identity.
func (s *IdentityStore) Get() Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.id
	if s.id.Role != nil {
		r := *s.id.Role
		id.Role = &r
	}
	if s.id.Ends != nil {
		id.Ends = make(map[string]int64, len(s.id.Ends))
		for k, v := range s.id.Ends {
			id.Ends[k] = v
		}
	}
	id.History = cloneHistory(s.id.History)
	return id
}

// LogID is this site's own log identity.
func (s *IdentityStore) LogID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id.LogID
}

// Generation is the highest master generation known here.
func (s *IdentityStore) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id.Generation
}

// Observe records gen when it is newer than the one known and reports
// whether it was.
func (s *IdentityStore) Observe(gen uint64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen <= s.id.Generation {
		return false, nil
	}
	s.id.Generation = gen
	return true, s.saveLocked()
}

// Promote makes this site master at generation gen (which must be above
// the one known) with the partition ends it holds now, and records the
// role, in one write.
func (s *IdentityStore) Promote(gen uint64, ends map[string]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen <= s.id.Generation {
		return fmt.Errorf("georeplicator: generation %d is not above the known %d", gen, s.id.Generation)
	}
	s.id.Generation = gen
	s.id.Ends = ends
	s.id.History = boundHistory(append(cloneHistory(s.id.History), Epoch{Generation: gen, Ends: maps.Clone(ends)}))
	s.id.Role = &Role{Name: RoleMaster, Generation: gen, Since: time.Now().UTC()}
	return s.saveLocked()
}

// DropEpoch removes the epoch of generation gen from the history of this
// site's log (the generation known stays): a promotion that recorded gen
// and then gave it up to another site holding the same number (two forced
// raises that reached no ZooKeeper ensemble in common) took no puts at it,
// and must not count as sharing that site's epoch gen when it follows it:
// the two logs forked at the generation before. It changes nothing when
// the history holds no epoch gen.
func (s *IdentityStore) DropEpoch(gen uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := make([]Epoch, 0, len(s.id.History))
	for _, e := range s.id.History {
		if e.Generation != gen {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(s.id.History) {
		return nil
	}
	s.id.History = kept
	return s.saveLocked()
}

// History is the history of this site's log (see Identity), a copy; empty
// for the first master's log.
func (s *IdentityStore) History() []Epoch {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id.History == nil {
		return []Epoch{}
	}
	return cloneHistory(s.id.History)
}

// Follow makes h, the history of the master this site now follows (its log
// cut where the two forked), the history of this site's log.
func (s *IdentityStore) Follow(h []Epoch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sameHistory(s.id.History, h) {
		return nil
	}
	s.id.History = boundHistory(cloneHistory(h))
	return s.saveLocked()
}

// Role is the role this site took at run time, nil when none.
func (s *IdentityStore) Role() *Role {
	return s.Get().Role
}

// SetRole records the role this site took at run time; nil clears it (the
// site then starts in the role its command line and configuration say).
func (s *IdentityStore) SetRole(r *Role) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r != nil {
		c := *r
		if c.Since.IsZero() {
			c.Since = time.Now().UTC()
		}
		r = &c
	}
	s.id.Role = r
	return s.saveLocked()
}

func (s *IdentityStore) saveLocked() error {
	data, _ := json.MarshalIndent(s.id, "", "  ")
	if err := writeFileAtomic(s.file, data); err != nil {
		return fmt.Errorf("georeplicator: write identity: %w", err)
	}
	return nil
}

// PartKey is the key of a partition in Identity.Ends.
func PartKey(topic string, partition int) string { return fmt.Sprintf("%s-%d", topic, partition) }
