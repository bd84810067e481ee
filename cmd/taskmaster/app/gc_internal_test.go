package app

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The server's collector defaults apply where the environment says
// nothing, and the memory limit stays within half of a cgroup's memory.
func TestGCDefaultsYieldToTheEnvironmentAndTheCgroup(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	require.Equal(t, GCSettings{Percent: DefaultGCPercent, MemoryLimit: DefaultMemoryLimit}, gcSettings(env(nil), 0))
	require.Equal(t, GCSettings{Percent: DefaultGCPercent, MemoryLimit: DefaultMemoryLimit}, gcSettings(env(nil), 8<<30))
	require.Equal(t, GCSettings{Percent: DefaultGCPercent, MemoryLimit: 128 << 20}, gcSettings(env(nil), 256<<20),
		"a 256 MiB container keeps its heap near half of it")
	require.Equal(t, GCSettings{MemoryLimit: DefaultMemoryLimit}, gcSettings(env(map[string]string{"GOGC": "100"}), 0))
	require.Equal(t, GCSettings{Percent: DefaultGCPercent}, gcSettings(env(map[string]string{"GOMEMLIMIT": "1GiB"}), 256<<20))
	require.Equal(t, GCSettings{}, gcSettings(env(map[string]string{"GOGC": "off", "GOMEMLIMIT": "1GiB"}), 0))
}
