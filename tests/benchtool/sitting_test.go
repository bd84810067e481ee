// Package benchtool runs `taskmaster bench` itself: the A/B sitting
// (--pairs) on its own PostgreSQL, as the lead runs it on a quiet machine.
package benchtool

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/binary"
)

// One pair of the single scenario, the built binary on both sides: two
// runs on fresh databases of one PostgreSQL, A then B, each report saying
// whether the machine let it be compared, and the medians per side.
func TestBenchPairsRunBothSidesAndReportMedians(t *testing.T) {
	t.Parallel()
	bin := binary.Build(t)
	var rep struct {
		Pairs int    `json:"pairs"`
		A     string `json:"a"`
		B     string `json:"b"`
		Runs  []struct {
			Pair    int    `json:"pair"`
			Side    string `json:"side"`
			Reports []struct {
				Scenario   string          `json:"scenario"`
				Comparable *bool           `json:"comparable"`
				Machine    json.RawMessage `json:"machine"`
				Tasks      int             `json:"tasks"`
				CPU        struct {
					ServerUSPerTask float64 `json:"server_us_per_task"`
				} `json:"cpu"`
				Storage struct {
					FinishedRows int64 `json:"finished_rows"`
				} `json:"storage"`
			} `json:"reports"`
		} `json:"runs"`
		Summary []struct {
			Scenario string `json:"scenario"`
			A        struct {
				Runs            int     `json:"runs"`
				EndToEnd        float64 `json:"end_to_end_tasks_per_sec"`
				ServerUSPerTask float64 `json:"server_us_per_task"`
			} `json:"a"`
			B struct {
				Runs     int     `json:"runs"`
				EndToEnd float64 `json:"end_to_end_tasks_per_sec"`
			} `json:"b"`
		} `json:"summary"`
	}
	log := runBench(t, bin, &rep, "--pairs", "1", "--server-bin", bin, "--scenario", "single", "--tasks", "200")
	require.Equal(t, 1, rep.Pairs)
	require.Equal(t, bin, rep.A)
	require.Len(t, rep.Runs, 2)
	require.Equal(t, "A", rep.Runs[0].Side)
	require.Equal(t, "B", rep.Runs[1].Side)
	for _, run := range rep.Runs {
		require.Len(t, run.Reports, 1)
		r := run.Reports[0]
		require.Equal(t, "single", r.Scenario)
		require.NotNil(t, r.Comparable, "every report says whether it is comparable")
		require.Contains(t, string(r.Machine), `"load_average_before"`)
		require.Equal(t, int64(200), r.Storage.FinishedRows, "each side runs on a database of its own")
		require.Greater(t, r.CPU.ServerUSPerTask, 0.0)
	}
	require.Len(t, rep.Summary, 1)
	require.Equal(t, 1, rep.Summary[0].A.Runs)
	require.Equal(t, 1, rep.Summary[0].B.Runs)
	require.Greater(t, rep.Summary[0].A.EndToEnd, 0.0)
	require.Greater(t, rep.Summary[0].B.EndToEnd, 0.0)
	require.Contains(t, log, "medians of 1 pairs")
}

// The batch scenario with --batch-preload submits every task before its
// workers start, as River's bench does, and reports the working phase
// apart: faster than end to end, which counts the submission too.
func TestBenchBatchPreloadReportsTheWorkingPhase(t *testing.T) {
	t.Parallel()
	var r struct {
		Scenario string  `json:"scenario"`
		EndToEnd float64 `json:"end_to_end_tasks_per_sec"`
		Work     float64 `json:"work_tasks_per_sec"`
		Submit   float64 `json:"submit_tasks_per_sec"`
		Storage  struct {
			FinishedRows int64 `json:"finished_rows"`
		} `json:"storage"`
	}
	log := runBench(t, binary.Build(t), &r, "--scenario", "batch", "--tasks", "3000", "--batch-preload")
	require.Equal(t, "batch", r.Scenario)
	require.Equal(t, int64(3000), r.Storage.FinishedRows)
	require.Positive(t, r.Submit)
	require.Greater(t, r.Work, r.EndToEnd, "the working phase leaves the submission out")
	require.Contains(t, log, "working phase:")
}

// runBench runs `bin bench args... --json FILE`, decodes the JSON report
// into report, and returns what the command printed.
func runBench(t *testing.T, bin string, report any, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, append(append([]string{"bench"}, args...), "--json", out)...)
	cmd.Env = os.Environ()
	log, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", log)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, report), "%s", b)
	return string(log)
}
