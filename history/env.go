package history

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// The environment the harness gives an external component (a team's own
// relay or consumer) so it can append to the run's history; see
// docs/contract.md.
const (
	// EnvFile is the history file the component may append ops to.
	EnvFile = "DELIVERYCHECK_HISTORY_FILE"
	// EnvProcess is the component's process name in the history, e.g.
	// "consumer-inventory-0".
	EnvProcess = "DELIVERYCHECK_PROCESS"
	// EnvBase is the run's start in Unix nanoseconds: every process times
	// its ops from it.
	EnvBase = "DELIVERYCHECK_BASE_UNIX_NANO"
)

// OpenFromEnv opens the recorder the harness named in the environment
// (EnvFile, EnvProcess, EnvBase). Outside a deliverycheck run (EnvFile
// unset) it returns nil and no error; a nil *Recorder is not usable, so
// callers check.
func OpenFromEnv() (*Recorder, error) {
	path := os.Getenv(EnvFile)
	if path == "" {
		return nil, nil
	}
	process := os.Getenv(EnvProcess)
	if process == "" {
		return nil, fmt.Errorf("history: %s is set but %s is not", EnvFile, EnvProcess)
	}
	ns, err := strconv.ParseInt(os.Getenv(EnvBase), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("history: %s: %w", EnvBase, err)
	}
	return NewRecorder(path, process, time.Unix(0, ns))
}
