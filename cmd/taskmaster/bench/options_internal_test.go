package bench

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
)

func TestPGSetOverridesTheBenchDatabaseSettings(t *testing.T) {
	o, err := parseOptions([]string{"--pg-set", "autovacuum_naptime=5s", "--pg-set", "shared_buffers=1GB", "--pg-set", "work_mem="}, io.Discard)
	require.NoError(t, err)
	s := serverSettings(o)
	require.Equal(t, "5s", s["autovacuum_naptime"])
	require.Equal(t, "1GB", s["shared_buffers"], "over the bench's own default")
	require.Equal(t, "4GB", s["max_wal_size"], "defaults not named stay")
	require.Contains(t, s, "work_mem")

	_, err = parseOptions([]string{"--pg-set", "autovacuum_naptime"}, io.Discard)
	require.ErrorContains(t, err, "want name=value")
	_, err = parseOptions([]string{"--pg-set", "=5s"}, io.Discard)
	require.ErrorContains(t, err, "want name=value")
	_, err = parseOptions([]string{"--url", "http://localhost:8080", "--pg-set", "jit=off"}, io.Discard)
	require.ErrorContains(t, err, "not to --url")
}

// The memory scenario's amplified payloads are what the server accepts that
// grows the most once stored: within the request allowance (4 times), and
// near it.
func TestAmplifiedPayloadsGrowNearTheServersAllowance(t *testing.T) {
	t.Parallel()
	raw, err := memoryPayload(Options{MemoryPayload: "amplified", PayloadBytes: 1 << 20})
	require.NoError(t, err)
	require.InDelta(t, 1<<20, len(raw), 10)
	stored, err := postgres.JSONStoredSize(raw)
	require.NoError(t, err)
	require.Greater(t, stored, int64(3.5*float64(len(raw))))
	require.LessOrEqual(t, stored, int64(application.MaxStoredJSONFactor*len(raw)))
	_, err = parseOptions([]string{"--memory-payload", "none"}, io.Discard)
	require.ErrorContains(t, err, "memory-payload")
}
