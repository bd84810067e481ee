package app

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The server's garbage collector. Serving tasks allocates a little per
// request (request bodies, decoded values, rows, answers) over a small live
// heap (tens of MiB): with Go's default GOGC of 100 the collector ran every
// few milliseconds and took about a tenth of the server's CPU in the batch
// and single scenarios (docs/performance.md). The server therefore lets the
// heap grow to DefaultGCPercent over what is live, under a soft memory limit
// that keeps large payloads in check (the collector works harder near it,
// as GOMEMLIMIT does). Either environment variable the Go runtime reads,
// GOGC or GOMEMLIMIT, set by the operator, wins over the default it names.

const (
	// DefaultGCPercent is the server's GOGC unless the environment sets
	// one.
	DefaultGCPercent = 400
	// DefaultMemoryLimit is the server's soft memory limit (GOMEMLIMIT)
	// unless the environment sets one: at most this, and at most half the
	// memory of the cgroup the process runs in, when it has a limit.
	DefaultMemoryLimit = 512 << 20
)

// GCSettings are the garbage collector's settings for the server, and
// where they came from.
type GCSettings struct {
	// Percent is GOGC; 0 means the environment's GOGC is kept.
	Percent int
	// MemoryLimit is GOMEMLIMIT in bytes; 0 means the environment's is
	// kept (or none).
	MemoryLimit int64
}

// gcSettings chooses the settings: the defaults for what the environment
// (lookup) does not set, the memory limit within half of cgroupLimit (0:
// none known).
func gcSettings(lookup func(string) (string, bool), cgroupLimit int64) GCSettings {
	var s GCSettings
	if _, ok := lookup("GOGC"); !ok {
		s.Percent = DefaultGCPercent
	}
	if _, ok := lookup("GOMEMLIMIT"); !ok {
		s.MemoryLimit = DefaultMemoryLimit
		if cgroupLimit > 0 {
			s.MemoryLimit = min(s.MemoryLimit, cgroupLimit/2)
		}
	}
	return s
}

// applyGC applies the server's settings to the runtime and returns them.
func applyGC() GCSettings {
	s := gcSettings(os.LookupEnv, cgroupMemoryLimit())
	if s.Percent > 0 {
		debug.SetGCPercent(s.Percent)
	}
	if s.MemoryLimit > 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
	return s
}

// cgroupMemoryLimit is the memory limit of the process's cgroup (v2
// memory.max, else v1 memory.limit_in_bytes), 0 when there is none or it
// cannot be read.
func cgroupMemoryLimit() int64 {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 { // "max", or v1's "unlimited"
			return 0
		}
		return n
	}
	return 0
}
