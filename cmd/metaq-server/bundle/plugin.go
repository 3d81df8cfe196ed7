package bundle

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"metaq/broker/config"
)

// loadProperties reads a MetaQ plugin file (Java properties, spec §4.5).
func loadProperties(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return config.ParseProperties(data), nil
}

func parseMillis(s string) (time.Duration, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad milliseconds %q", s)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// samsaSync is the synchronous-replication part of samsa_master.properties
// (spec §4.5); zero values leave the broker's MetaQ defaults.
type samsaSync struct {
	timeout          time.Duration // sendToSlaveTimeoutInMills
	failureThreshold int           // slaveContinuousFailureThreshold
	probeInterval    time.Duration // checkSlaveIntervalInMills
}

func parseSamsaSync(props map[string]string) (samsaSync, error) {
	var s samsaSync
	var err error
	if v, ok := props["sendToSlaveTimeoutInMills"]; ok && strings.TrimSpace(v) != "" {
		if s.timeout, err = parseMillis(v); err != nil {
			return s, fmt.Errorf("sendToSlaveTimeoutInMills: %w, expected milliseconds > 0", err)
		}
	}
	if v, ok := props["checkSlaveIntervalInMills"]; ok && strings.TrimSpace(v) != "" {
		if s.probeInterval, err = parseMillis(v); err != nil {
			return s, fmt.Errorf("checkSlaveIntervalInMills: %w, expected milliseconds > 0", err)
		}
	}
	if v, ok := props["slaveContinuousFailureThreshold"]; ok && strings.TrimSpace(v) != "" {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n <= 0 {
			return s, fmt.Errorf("slaveContinuousFailureThreshold: bad value %q, expected an integer > 0", v)
		}
		s.failureThreshold = n
	}
	return s, nil
}
