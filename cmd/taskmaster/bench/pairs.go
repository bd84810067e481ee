package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// A/B comparisons in one sitting (--pairs N with --server-bin): the
// scenarios run against the --server-bin binary (A) and against this one
// (B), alternating A B, B A, A B, ... so that a drift of the machine over
// the sitting weighs on both, each run with a fresh database on the same
// PostgreSQL and a fresh server, all driven by this binary's load
// generator. Then the medians of each side. With --peer, the peer's
// benchmark runs once per pair, after it.

// PairsReport is the JSON report of a sitting of pairs.
type PairsReport struct {
	Pairs   int            `json:"pairs"`
	A       string         `json:"a"`
	B       string         `json:"b"`
	Runs    []PairRun      `json:"runs"`
	Peers   []PeerFigures  `json:"peers,omitempty"`
	Summary []PairsSummary `json:"summary"`
}

// PairRun is one run of one side.
type PairRun struct {
	Pair    int      `json:"pair"`
	Side    string   `json:"side"`
	Binary  string   `json:"binary"`
	Reports []Report `json:"reports"`
}

// PairsSummary holds a scenario's medians on each side, and B over A.
type PairsSummary struct {
	Scenario string  `json:"scenario"`
	A        Medians `json:"a"`
	B        Medians `json:"b"`
	// RatioEndToEnd is B's median end-to-end throughput over A's.
	RatioEndToEnd float64 `json:"ratio_end_to_end"`
	// Peer holds the peer's medians and each side's median over them (the
	// batch scenario, with --peer).
	Peer *PeerMedians `json:"peer,omitempty"`
}

// Medians are the medians of one side's runs of a scenario.
type Medians struct {
	Runs              int     `json:"runs"`
	ComparableRuns    int     `json:"comparable_runs"`
	EndToEndPerSec    float64 `json:"end_to_end_tasks_per_sec"`
	WorkPerSec        float64 `json:"work_tasks_per_sec,omitempty"`
	SubmitPerSec      float64 `json:"submit_tasks_per_sec"`
	ClaimP50MS        float64 `json:"claim_p50_ms"`
	ClaimP99MS        float64 `json:"claim_p99_ms"`
	ServerUSPerTask   float64 `json:"server_us_per_task"`
	PostgresUSPerTask float64 `json:"postgres_us_per_task"`
	LoadGenUSPerTask  float64 `json:"load_generator_us_per_task"`
}

// PeerMedians are the medians of a peer's runs, and each side's median
// end-to-end throughput over the peer's own figure.
type PeerMedians struct {
	Name             string  `json:"name"`
	Runs             int     `json:"runs"`
	ComparableRuns   int     `json:"comparable_runs"`
	JobsPerSec       float64 `json:"jobs_per_sec"`
	EndToEndPerSec   float64 `json:"end_to_end_jobs_per_sec"`
	PeerUSPerJob     float64 `json:"peer_us_per_job"`
	PostgresUSPerJob float64 `json:"postgres_us_per_job"`
	RatioA           float64 `json:"ratio_a"`
	RatioB           float64 `json:"ratio_b"`
	// WorkRatioA and WorkRatioB put each side's working phase (batch
	// with --batch-preload) over the peer's own figure.
	WorkRatioA float64 `json:"work_ratio_a,omitempty"`
	WorkRatioB float64 `json:"work_ratio_b,omitempty"`
}

// pairOrder is the sides' order in pair i (from 0): A B, then B A, ...
func pairOrder(i int) []string {
	if i%2 == 0 {
		return []string{"A", "B"}
	}
	return []string{"B", "A"}
}

// runPairs runs the sitting: opts.Pairs pairs of runs of opts.Scenarios.
func runPairs(ctx context.Context, opts Options, stdout, stderr io.Writer) (PairsReport, error) {
	a, err := serverBinary(opts)
	if err != nil {
		return PairsReport{}, err
	}
	b, err := os.Executable()
	if err != nil {
		return PairsReport{}, err
	}
	rep := PairsReport{Pairs: opts.Pairs, A: a, B: b}
	c, err := startCluster(ctx, opts, stderr)
	if err != nil {
		return rep, err
	}
	defer c.stop()
	bins := map[string]string{"A": a, "B": b}
	for i := range opts.Pairs {
		for _, side := range pairOrder(i) {
			database := fmt.Sprintf("taskmaster_%d_%s", i+1, strings.ToLower(side))
			fmt.Fprintf(stderr, "\n==== pair %d of %d, %s: %s ====\n", i+1, opts.Pairs, side, bins[side])
			reports, err := runSide(ctx, c, opts, bins[side], database, stderr)
			if err != nil {
				return rep, fmt.Errorf("pair %d, %s: %w", i+1, side, err)
			}
			rep.Runs = append(rep.Runs, PairRun{Pair: i + 1, Side: side, Binary: bins[side], Reports: reports})
			for _, r := range reports {
				fmt.Fprintf(stdout, "\n---- pair %d, %s (%s)", i+1, side, bins[side])
				printReport(stdout, r)
			}
		}
		for _, p := range opts.Peers {
			fig, err := runPeer(ctx, c, p, peerJobs(opts), stderr)
			if err != nil {
				return rep, fmt.Errorf("pair %d: %w", i+1, err)
			}
			rep.Peers = append(rep.Peers, fig)
			fmt.Fprintf(stdout, "\n---- pair %d, peer\n", i+1)
			printPeer(stdout, PeerRatio{Peer: fig})
		}
	}
	rep.Summary = summarize(opts.Scenarios, rep.Runs, rep.Peers)
	printSummary(stdout, rep)
	return rep, nil
}

// runSide starts bin's server on a fresh database of c, runs the scenarios
// and stops it; the database is dropped.
func runSide(ctx context.Context, c *cluster, opts Options, bin, database string, log io.Writer) ([]Report, error) {
	env, err := startServer(ctx, c, opts, bin, database, log)
	if err != nil {
		return nil, err
	}
	defer c.dropDatabase(context.WithoutCancel(ctx), database)
	defer env.stop()
	var reports []Report
	for _, name := range opts.Scenarios {
		fmt.Fprintf(log, "\n== scenario %s ==\n", name)
		r, err := runScenario(ctx, env, name, opts, log)
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", name, err)
		}
		r.Via = opts.Via[0]
		reports = append(reports, r)
	}
	return reports, nil
}

// summarize computes each scenario's medians per side.
func summarize(scenarios []string, runs []PairRun, peers []PeerFigures) []PairsSummary {
	var out []PairsSummary
	for _, name := range scenarios {
		s := PairsSummary{Scenario: name}
		bySide := map[string][]Report{}
		for _, run := range runs {
			for _, r := range run.Reports {
				if r.Scenario == name {
					bySide[run.Side] = append(bySide[run.Side], r)
				}
			}
		}
		s.A, s.B = medians(bySide["A"]), medians(bySide["B"])
		if s.A.EndToEndPerSec > 0 {
			s.RatioEndToEnd = round3(s.B.EndToEndPerSec / s.A.EndToEndPerSec)
		}
		if name == "batch" && len(peers) > 0 {
			s.Peer = peerMedians(peers, s.A, s.B)
		}
		out = append(out, s)
	}
	return out
}

func medians(rs []Report) Medians {
	m := Medians{Runs: len(rs), ComparableRuns: countOf(rs, func(r Report) bool { return r.Comparable })}
	cpu := func(f func(*CPUBreakdown) float64) func(Report) float64 {
		return func(r Report) float64 {
			if r.CPU == nil {
				return 0
			}
			return f(r.CPU)
		}
	}
	m.EndToEndPerSec = medianOf(rs, func(r Report) float64 { return r.EndToEndTasksPerSec })
	m.WorkPerSec = medianOf(rs, func(r Report) float64 { return r.WorkTasksPerSec })
	m.SubmitPerSec = medianOf(rs, func(r Report) float64 { return r.SubmitTasksPerSec })
	m.ClaimP50MS = medianOf(rs, func(r Report) float64 { return r.ClaimLatencyMS.P50 })
	m.ClaimP99MS = medianOf(rs, func(r Report) float64 { return r.ClaimLatencyMS.P99 })
	m.ServerUSPerTask = medianOf(rs, cpu(func(b *CPUBreakdown) float64 { return b.ServerUSPerTask }))
	m.PostgresUSPerTask = medianOf(rs, cpu(func(b *CPUBreakdown) float64 { return b.PostgresUSPerTask }))
	m.LoadGenUSPerTask = medianOf(rs, cpu(func(b *CPUBreakdown) float64 { return b.LoadGenUSPerTask }))
	return m
}

func peerMedians(peers []PeerFigures, a, b Medians) *PeerMedians {
	m := &PeerMedians{Name: peers[0].Name, Runs: len(peers), ComparableRuns: countOf(peers, func(p PeerFigures) bool { return p.Comparable })}
	m.JobsPerSec = medianOf(peers, func(p PeerFigures) float64 { return p.JobsPerSec })
	m.EndToEndPerSec = medianOf(peers, func(p PeerFigures) float64 { return p.EndToEndJobsPerSec })
	m.PeerUSPerJob = medianOf(peers, func(p PeerFigures) float64 { return p.PeerUSPerJob })
	m.PostgresUSPerJob = medianOf(peers, func(p PeerFigures) float64 { return p.PostgresUSPerJob })
	if m.JobsPerSec > 0 {
		m.RatioA, m.RatioB = round3(a.EndToEndPerSec/m.JobsPerSec), round3(b.EndToEndPerSec/m.JobsPerSec)
		m.WorkRatioA, m.WorkRatioB = round3(a.WorkPerSec/m.JobsPerSec), round3(b.WorkPerSec/m.JobsPerSec)
	}
	return m
}

// medianOf is the median of f over xs.
func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		v = append(v, f(x))
	}
	return median(v)
}

// countOf counts the xs that ok accepts.
func countOf[T any](xs []T, ok func(T) bool) int {
	n := 0
	for _, x := range xs {
		if ok(x) {
			n++
		}
	}
	return n
}

// median is the middle value of v (the mean of the two middle ones for an
// even count); 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return round3((s[n/2-1] + s[n/2]) / 2)
}

// printSummary prints each scenario's medians, A against B.
func printSummary(w io.Writer, rep PairsReport) {
	fmt.Fprintf(w, "\n==== medians of %d pairs: A = %s, B = %s ====\n", rep.Pairs, rep.A, rep.B)
	for _, s := range rep.Summary {
		fmt.Fprintf(w, "\nscenario %s (B / A end to end: %.2fx)\n", s.Scenario, s.RatioEndToEnd)
		for _, side := range []struct {
			name string
			m    Medians
		}{{"A", s.A}, {"B", s.B}} {
			m := side.m
			fmt.Fprintf(w, "  %s: end to end %8.0f tasks/s, submit %8.0f tasks/s, claim p50 %7.2f ms p99 %7.2f ms; CPU per task server %5.0f µs, postgres %5.0f µs, load generator %5.0f µs (%d runs, %d comparable)\n",
				side.name, m.EndToEndPerSec, m.SubmitPerSec, m.ClaimP50MS, m.ClaimP99MS, m.ServerUSPerTask, m.PostgresUSPerTask, m.LoadGenUSPerTask, m.Runs, m.ComparableRuns)
			if m.WorkPerSec > 0 {
				fmt.Fprintf(w, "  %s: working phase %8.0f tasks/s (every task submitted before the workers started)\n", side.name, m.WorkPerSec)
			}
			if m.ComparableRuns < m.Runs {
				fmt.Fprintf(w, "  !!!!! %s: %d of %d runs NOT COMPARABLE (the machine was busy): compare CPU per task, not throughput !!!!!\n", side.name, m.Runs-m.ComparableRuns, m.Runs)
			}
		}
		if p := s.Peer; p != nil {
			fmt.Fprintf(w, "  peer %s: %8.0f jobs/s (its own figure), %8.0f end to end; CPU per job %s %.0f µs, postgres %.0f µs (%d runs, %d comparable)\n",
				p.Name, p.JobsPerSec, p.EndToEndPerSec, p.Name, p.PeerUSPerJob, p.PostgresUSPerJob, p.Runs, p.ComparableRuns)
			fmt.Fprintf(w, "  batch end to end / %s: A %.2fx, B %.2fx\n", p.Name, p.RatioA, p.RatioB)
			if p.WorkRatioA > 0 || p.WorkRatioB > 0 {
				fmt.Fprintf(w, "  batch working phase / %s working phase: A %.2fx, B %.2fx\n", p.Name, p.WorkRatioA, p.WorkRatioB)
			}
		}
	}
}
