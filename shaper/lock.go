package shaper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// errLocked says that another process holds a lock.
var errLocked = errors.New("locked")

// lockName is the file in the data directory that an embedded shaper locks.
const lockName = "shaper.lock"

// holder is what a shaper writes into the lock of its data directory, so
// that a second one can say who holds it.
type holder struct {
	PID     int       `json:"pid"`
	Host    string    `json:"host"`
	HTTP    string    `json:"http"`
	NATS    string    `json:"nats"`
	Started time.Time `json:"started"`
}

func (h holder) String() string {
	return fmt.Sprintf("pid %d on %s (HTTP %s, NATS %s, since %s)", h.PID, h.Host, h.HTTP, h.NATS, h.Started.Format(time.RFC3339))
}

// lockDataDir locks dir for this process, or returns a *ConfigError naming
// the process that holds it. Two shapers on one embedded store would both
// deliver every job. The returned file holds the lock until it is closed
// (or the process ends).
func lockDataDir(dir string, me holder) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &ConfigError{Field: "DataDir", Err: err}
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, &ConfigError{Field: "DataDir", Err: fmt.Errorf("%s is not writable: %w", dir, err)}
	}
	if err := lockFile(f); err != nil {
		defer f.Close()
		if !errors.Is(err, errLocked) {
			return nil, &ConfigError{Field: "DataDir", Err: fmt.Errorf("lock %s: %w", path, err)}
		}
		var h holder
		b, _ := io.ReadAll(f)
		if json.Unmarshal(b, &h) != nil || h.PID == 0 {
			return nil, &ConfigError{Field: "DataDir", Err: fmt.Errorf("%s is in use by another shaper (it holds %s)", dir, path)}
		}
		return nil, &ConfigError{Field: "DataDir", Err: fmt.Errorf("%s is in use by another shaper: %s", dir, h)}
	}
	writeHolder(f, me)
	return f, nil
}

// writeHolder writes h into the lock file f.
func writeHolder(f *os.File, h holder) {
	b, _ := json.Marshal(h)
	if err := f.Truncate(0); err == nil {
		f.WriteAt(append(b, '\n'), 0)
	}
}
