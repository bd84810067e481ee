package bench

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

// A run is comparable only when the benchmark owns the server and
// PostgreSQL and other processes took at most 5 % of the machine, before
// and during it.
func TestRunsAreComparableOnlyOnAQuietMachine(t *testing.T) {
	t.Parallel()
	quiet := Machine{Owned: true, OtherShareBefore: 0.01}
	cpu := func(other float64) *CPUBreakdown {
		return &CPUBreakdown{Cores: 2, WallSeconds: 10, OtherSeconds: other}
	}

	r := Report{CPU: cpu(0.9)} // 4.5 % of 2 cores x 10 s
	judge(&r, quiet)
	require.True(t, r.Comparable)
	require.Empty(t, r.NotComparable)
	require.InDelta(t, 0.045, r.Machine.OtherShareDuring, 1e-9)

	r = Report{CPU: cpu(1.2)} // 6 %
	judge(&r, quiet)
	require.False(t, r.Comparable)
	require.Contains(t, r.NotComparable, "6.0% of the machine during the run")

	busyBefore := quiet
	busyBefore.OtherShareBefore = 0.3
	r = Report{CPU: cpu(0)}
	judge(&r, busyBefore)
	require.False(t, r.Comparable)
	require.Contains(t, r.NotComparable, "30.0% of the machine just before the run")

	notOwned := quiet
	notOwned.Owned = false
	r = Report{CPU: cpu(0)}
	judge(&r, notOwned)
	require.False(t, r.Comparable, "with --url the server's CPU is not told apart")

	var out strings.Builder
	printReport(&out, Report{Scenario: "single", Comparable: false, NotComparable: "other processes took 6.0% of the machine during the run (limit 5%)", Machine: &Machine{Owned: true}})
	require.Contains(t, out.String(), "NOT COMPARABLE: other processes took 6.0%")
}

func TestLoadAverageIsRead(t *testing.T) {
	t.Parallel()
	l, err := loadAverage()
	require.NoError(t, err)
	for _, v := range l {
		require.GreaterOrEqual(t, v, 0.0)
	}
	m := watchBefore(&environment{}, 0)
	require.False(t, m.Owned)
	require.Equal(t, l[2], m.LoadAverage[2], "the 15-minute average does not move in a moment")
}

// The sides alternate A B, B A, ... and the medians are taken per side and
// scenario.
func TestPairsAlternateAndSummarizeMedians(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"A", "B"}, pairOrder(0))
	require.Equal(t, []string{"B", "A"}, pairOrder(1))
	require.Equal(t, []string{"A", "B"}, pairOrder(2))

	run := func(pair int, side string, e2e, server float64, comparable bool) PairRun {
		return PairRun{Pair: pair, Side: side, Reports: []Report{{
			Scenario: "batch", EndToEndTasksPerSec: e2e, Comparable: comparable,
			ClaimLatencyMS: Percentiles{P50: e2e / 100, P99: e2e / 10},
			CPU:            &CPUBreakdown{ServerUSPerTask: server, PostgresUSPerTask: 2 * server, LoadGenUSPerTask: 10},
		}}}
	}
	runs := []PairRun{
		run(1, "A", 1000, 100, true), run(1, "B", 1500, 60, true),
		run(2, "B", 1400, 70, false), run(2, "A", 900, 110, true),
		run(3, "A", 5000, 90, true), run(3, "B", 1600, 50, true),
	}
	peers := []PeerFigures{{Name: "river", JobsPerSec: 2000, Comparable: true}, {Name: "river", JobsPerSec: 3000}, {Name: "river", JobsPerSec: 2500, Comparable: true}}
	s := summarize([]string{"batch"}, runs, peers)
	require.Len(t, s, 1)
	require.Equal(t, Medians{Runs: 3, ComparableRuns: 3, EndToEndPerSec: 1000, ClaimP50MS: 10, ClaimP99MS: 100,
		ServerUSPerTask: 100, PostgresUSPerTask: 200, LoadGenUSPerTask: 10}, s[0].A)
	require.Equal(t, 1500.0, s[0].B.EndToEndPerSec)
	require.Equal(t, 60.0, s[0].B.ServerUSPerTask)
	require.Equal(t, 2, s[0].B.ComparableRuns)
	require.Equal(t, 1.5, s[0].RatioEndToEnd)
	require.NotNil(t, s[0].Peer)
	require.Equal(t, 2500.0, s[0].Peer.JobsPerSec)
	require.Equal(t, 2, s[0].Peer.ComparableRuns)
	require.Equal(t, 0.4, s[0].Peer.RatioA)
	require.Equal(t, 0.6, s[0].Peer.RatioB)

	require.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
	require.Equal(t, 0.0, median(nil))

	var out strings.Builder
	printSummary(&out, PairsReport{Pairs: 3, A: "old", B: "new", Summary: s})
	require.Contains(t, out.String(), "1 of 3 runs NOT COMPARABLE")
	require.Contains(t, out.String(), "batch end to end / river: A 0.40x, B 0.60x")
}

func TestSittingOptions(t *testing.T) {
	t.Parallel()
	o, err := parseOptions([]string{"--pairs", "3", "--server-bin", "/bin/true", "--scenario", "batch,single", "--peer", "river=/opt/river"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, 3, o.Pairs)
	require.Equal(t, []string{"/opt/river"}, o.Peers)

	_, err = parseOptions([]string{"--pairs", "3"}, io.Discard)
	require.ErrorContains(t, err, "--server-bin")
	_, err = parseOptions([]string{"--peer", "river=/opt/river", "--scenario", "single"}, io.Discard)
	require.ErrorContains(t, err, "add batch")
	_, err = parseOptions([]string{"--peer", "faktory=/opt/faktory"}, io.Discard)
	require.ErrorContains(t, err, "unknown peer")
	_, err = parseOptions([]string{"--peer", "river"}, io.Discard)
	require.ErrorContains(t, err, "want name=path")
	_, err = parseOptions([]string{"--url", "http://localhost:8080", "--pairs", "3", "--server-bin", "/bin/true"}, io.Discard)
	require.ErrorContains(t, err, "not on --url")
}

// riverOutput is what `river bench --num-total-jobs 5000` prints (v0.43).
const riverOutput = `bench: jobs worked [          0 ], inserted [       5000 ], job/sec [        0.0 ] [0s]
bench: jobs worked [       3999 ], inserted [          0 ], job/sec [     1999.5 ] [2s]
bench: jobs worked [       1001 ], inserted [          0 ], job/sec [      500.5 ] [2s]
bench: total jobs worked [       5000 ], total jobs inserted [       5000 ], overall job/sec [     1854.4 ], running 2.696328518s
`

func TestRiverBenchOutputIsParsed(t *testing.T) {
	t.Parallel()
	worked, perSec, err := parseRiverBench(riverOutput)
	require.NoError(t, err)
	require.Equal(t, 5000, worked)
	require.Equal(t, 1854.4, perSec)
	_, _, err = parseRiverBench("bench: jobs worked [ 1 ], inserted [ 0 ], job/sec [ 0.5 ] [2s]\n")
	require.ErrorContains(t, err, "no summary line")
}

// The peer runs in a database of its own on the benchmark's PostgreSQL:
// migrate-up, then bench for as many jobs as asked, on a URL that works
// (the stand-in for River's CLI reaches the database with psql); its
// figures and the ratio follow. With TASKMASTER_RIVER_BIN naming River's
// CLI, the real one runs as well.
func TestPeerRunsRiversBenchOnTheSameDatabaseServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := startCluster(ctx, Options{}, io.Discard)
	require.NoError(t, err)
	t.Cleanup(c.stop)
	bin, err := localpg.FindBinaries()
	require.NoError(t, err)
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	stub := filepath.Join(dir, "river")
	script := `#!/bin/sh
echo "$@" >> ` + calls + `
case "$1" in
version) echo "River version stub" ;;
migrate-up) exec ` + filepath.Join(bin, "psql") + ` -q -X "$3" -c 'CREATE TABLE river_job (id bigint)' ;;
bench)
	` + filepath.Join(bin, "psql") + ` -q -X "$3" -c "INSERT INTO river_job SELECT generate_series(1, $5)" >/dev/null || exit 1
	n=$(` + filepath.Join(bin, "psql") + ` -X -At "$3" -c 'SELECT count(*) FROM river_job') || exit 1
	echo "bench: total jobs worked [ $n ], total jobs inserted [ $n ], overall job/sec [ 1234.5 ], running 1s" ;;
*) exit 2 ;;
esac
`
	require.NoError(t, os.WriteFile(stub, []byte(script), 0o755))

	fig, err := runPeer(ctx, c, stub, 300, io.Discard)
	require.NoError(t, err)
	require.Equal(t, "River version stub", fig.Version)
	require.Equal(t, 300, fig.Jobs)
	require.Equal(t, 1234.5, fig.JobsPerSec)
	require.Greater(t, fig.EndToEndJobsPerSec, 0.0)
	require.NotNil(t, fig.Machine)
	require.True(t, fig.Machine.Owned)
	log, err := os.ReadFile(calls)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	require.Len(t, lines, 3)
	require.Equal(t, "version", lines[0])
	require.Equal(t, "migrate-up --database-url "+c.url(peerDatabase), lines[1])
	require.Equal(t, "bench --database-url "+c.url(peerDatabase)+" --num-total-jobs 300", lines[2])

	// Its database is gone afterwards.
	admin, err := sqlx.Open("postgres", c.url("postgres"))
	require.NoError(t, err)
	defer admin.Close()
	var n int
	require.NoError(t, admin.Get(&n, `SELECT count(*) FROM pg_database WHERE datname = $1`, peerDatabase))
	require.Zero(t, n)

	pr := ratioTo(Report{EndToEndTasksPerSec: 617.25}, fig)
	require.Equal(t, 0.5, pr.Ratio)
	require.Zero(t, pr.WorkRatio, "no working phase: the run did not preload")
	pr = ratioTo(Report{EndToEndTasksPerSec: 617.25, WorkTasksPerSec: 740.7}, fig)
	require.Equal(t, 0.6, pr.WorkRatio, "working phase over the peer's working phase")
	var b strings.Builder
	printPeer(&b, pr)
	require.Contains(t, b.String(), "batch working phase / river working phase: 0.60x")

	if real := os.Getenv("TASKMASTER_RIVER_BIN"); real != "" {
		fig, err := runPeer(ctx, c, real, 2000, io.Discard)
		require.NoError(t, err)
		require.Equal(t, 2000, fig.Jobs)
		require.Greater(t, fig.JobsPerSec, 0.0)
		require.Greater(t, fig.PeerCPUSeconds, 0.0)
	}
}
