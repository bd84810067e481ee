package bench

import (
	"os"
	"os/exec"
)

// serverSettings are the settings of the benchmark's own PostgreSQL: durable
// defaults, more shared buffers and WAL room, pg_stat_statements when
// --statements asks for it, and what --pg-set overrides.
func serverSettings(opts Options) map[string]string {
	s := map[string]string{"shared_buffers": "512MB", "max_wal_size": "4GB"}
	if opts.Statements > 0 {
		s["shared_preload_libraries"] = "pg_stat_statements"
		s["pg_stat_statements.track_planning"] = "on"
		s["track_io_timing"] = "on"
	}
	for k, v := range opts.PGSettings {
		s[k] = v
	}
	return s
}

// serverBinary is the binary whose `serve` the benchmark starts: this one,
// or --server-bin (to compare two builds under the same load generator).
func serverBinary(opts Options) (string, error) {
	if opts.ServerBin != "" {
		return exec.LookPath(opts.ServerBin)
	}
	return os.Executable()
}
