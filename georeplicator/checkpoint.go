package georeplicator

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// checkpoint is the slave's durable cursor: every master log entry below
// MasterPos is applied here and fsynced. It is written only after the store
// has flushed the data it covers, so after a crash the slave resumes at or
// before what it really has, never after (entries it already holds are
// verified and skipped, see Receiver.apply).
type checkpoint struct {
	Version   int   `json:"version"`
	MasterPos int64 `json:"masterLogPos"`
	// MasterLog is the log MasterPos is a position in (the master's
	// LogID; "" from a master without one).
	MasterLog string    `json:"masterLogId,omitempty"`
	Written   time.Time `json:"written"`
}

// loadCheckpoint returns -1 when there is no checkpoint (an empty slave).
func loadCheckpoint(file string) (int64, string, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return -1, "", nil
	}
	if err != nil {
		return -1, "", fmt.Errorf("georeplicator: read checkpoint: %w", err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return -1, "", fmt.Errorf("georeplicator: parse checkpoint %s: %w", file, err)
	}
	return c.MasterPos, c.MasterLog, nil
}

func saveCheckpoint(file string, pos int64, masterLog string, now time.Time) error {
	data, _ := json.Marshal(checkpoint{Version: 1, MasterPos: pos, MasterLog: masterLog, Written: now})
	if err := writeFileAtomic(file, data); err != nil {
		return fmt.Errorf("georeplicator: write checkpoint: %w", err)
	}
	return nil
}
