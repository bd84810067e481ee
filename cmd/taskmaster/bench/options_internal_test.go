package bench

import (
	"io"
	"strings"
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

func TestViaNamesTheWaysToTheDatabase(t *testing.T) {
	o, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{ViaDirect}, o.Via, "direct by default")
	o, err = parseOptions([]string{"--via", "direct,pgbouncer", "--scenario", "batch,single"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{ViaDirect, ViaPgBouncer}, o.Via)
	o, err = parseOptions([]string{"--via", "pgbouncer, pgbouncer"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{ViaPgBouncer}, o.Via, "each way once")
	_, err = parseOptions([]string{"--via", "pgpool"}, io.Discard)
	require.ErrorContains(t, err, `unknown "pgpool"`)
	_, err = parseOptions([]string{"--url", "http://localhost:8080", "--via", "pgbouncer"}, io.Discard)
	require.ErrorContains(t, err, "not to --url")
}

func TestComparisonSetsPgBouncerAgainstDirect(t *testing.T) {
	var b strings.Builder
	printComparison(&b, []Report{
		{Scenario: "batch", Via: ViaDirect, EndToEndTasksPerSec: 10000, ClaimLatencyMS: Percentiles{P50: 2, P99: 8}},
		{Scenario: "batch", Via: ViaPgBouncer, EndToEndTasksPerSec: 8000, ClaimLatencyMS: Percentiles{P50: 3, P99: 9}},
		{Scenario: "single", Via: ViaPgBouncer, EndToEndTasksPerSec: 900},
	})
	require.Contains(t, b.String(), "batch      end to end     8000 vs    10000 tasks/s (0.80x)")
	require.NotContains(t, b.String(), "single", "no direct figure to compare with")
}
