package georeplicator

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Identity is what a site's data directory knows about mastership of its
// brokerId (<dataPath>/replication.identity):
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
type Identity struct {
	LogID      string           `json:"logId"`
	Generation uint64           `json:"generation"`
	Ends       map[string]int64 `json:"promotionEnds,omitempty"` // "topic-partition" -> end
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
	if s.id.Ends != nil {
		id.Ends = make(map[string]int64, len(s.id.Ends))
		for k, v := range s.id.Ends {
			id.Ends[k] = v
		}
	}
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
// the one known) with the partition ends it holds now.
func (s *IdentityStore) Promote(gen uint64, ends map[string]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen <= s.id.Generation {
		return fmt.Errorf("georeplicator: generation %d is not above the known %d", gen, s.id.Generation)
	}
	s.id.Generation = gen
	s.id.Ends = ends
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
