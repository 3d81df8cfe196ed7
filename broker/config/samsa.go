package config

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Samsa is a loaded samsa_master.properties: the master side of a
// synchronous (samsa/gregor) pair. Zero durations and counts leave the
// broker's MetaQ defaults.
type Samsa struct {
	File string
	// Slave is the gregor slave's MetaQ-protocol host:port (required).
	Slave string
	// SyncTimeout is sendToSlaveTimeoutInMills (> 0; default 2000ms).
	SyncTimeout time.Duration
	// SyncFailureThreshold is slaveContinuousFailureThreshold (> 0; default 100).
	SyncFailureThreshold int
	// SyncProbeInterval is checkSlaveIntervalInMills (> 0; default 100ms).
	SyncProbeInterval time.Duration
	// RecoverOffset starts the master in offset-recovery mode (default false).
	RecoverOffset bool
	// RecoverParallel runs the recovery in parallel (default true).
	RecoverParallel bool
	// RecoverParallelHint is the number of recovery workers (> 0; 0 = the
	// number of CPUs).
	RecoverParallelHint int
}

// samsaKeys are the keys MetaQ's SamsaMasterBroker reads;
// callbackThreadCount is accepted and has no effect here.
var samsaKeys = []string{
	"slave", "callbackThreadCount", "recoverOffset", "recoverParallel", "recoverParallelHint",
	"sendToSlaveTimeoutInMills", "slaveContinuousFailureThreshold", "checkSlaveIntervalInMills",
}

// LoadSamsa reads and validates a samsa_master.properties file. Unknown
// keys are warnings (MetaQ ignores them).
func LoadSamsa(path string) (*Samsa, []Warning, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: read %s: %w", path, err)
	}
	return ParseSamsa(path, data)
}

// ParseSamsa is LoadSamsa on bytes already read; file names them in errors.
func ParseSamsa(file string, data []byte) (*Samsa, []Warning, error) {
	var p problems
	r := propertiesReader(file, data, samsaKeys, &p)
	s := &Samsa{File: file, RecoverParallel: true}
	r.required("slave")
	s.Slave = r.addr("slave", "")
	s.SyncTimeout = r.millis("sendToSlaveTimeoutInMills", 0, 1)
	s.SyncProbeInterval = r.millis("checkSlaveIntervalInMills", 0, 1)
	s.SyncFailureThreshold = r.int32("slaveContinuousFailureThreshold", 0, 1)
	// MetaQ reads these with Boolean.valueOf: "true" in any case is true,
	// anything else false.
	s.RecoverOffset = strings.EqualFold(r.str("recoverOffset", "false"), "true")
	s.RecoverParallel = strings.EqualFold(r.str("recoverParallel", "true"), "true")
	s.RecoverParallelHint = r.int32("recoverParallelHint", 0, 1)
	if err := p.err(); err != nil {
		return nil, p.warnings, err
	}
	return s, p.warnings, nil
}

// propertiesReader reads a Java properties file into one section: a
// repeated key warns and keeps its last value, a key not in known warns.
func propertiesReader(file string, data []byte, known []string, p *problems) sectionReader {
	sec := &rawSection{File: file}
	for _, kv := range parseProperties(data) {
		if _, dup := sec.get(kv[0]); dup {
			p.warnf(file, "", kv[0], "key appears more than once; the last value %q wins", kv[1])
		}
		sec.set(rawKey{Name: kv[0], Value: strings.TrimSpace(kv[1]), File: file})
	}
	for _, k := range sec.Keys {
		if !contains(known, k.Name) {
			p.unknownf(file, "", k.Name, "unknown key is ignored; did you mean %q?", closest(known, k.Name))
		}
	}
	return sectionReader{sec: sec, file: file, p: p}
}
