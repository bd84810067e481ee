package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A peer is another job queue whose own benchmark runs on a PostgreSQL
// started the same way as the runs' (the same cluster with --pairs) in the
// same sitting, so that the batch scenario's throughput can be put next to
// it: same machine, same PostgreSQL settings, same minutes. The peer's binary is the user's to build (docs/performance.md);
// nothing of it is vendored here.
//
// River (github.com/riverqueue/river, `river bench`) is the one peer known:
// its benchmark inserts --num-total-jobs jobs first, then works them down
// with an in-process client (no HTTP), and prints its throughput over the
// working phase.

// peerRiver names River's CLI as a peer (--peer river=PATH).
const peerRiver = "river"

// peerDatabase is the database a peer's benchmark runs in, beside the
// runs' own.
const peerDatabase = "peer_river"

// PeerFigures are one run of a peer's benchmark.
type PeerFigures struct {
	Name    string `json:"name"`
	Binary  string `json:"binary"`
	Version string `json:"version,omitempty"`
	Jobs    int    `json:"jobs"`
	// JobsPerSec is the peer's own figure: River's `overall job/sec`, over
	// its working phase (the jobs were all inserted before it started).
	JobsPerSec float64 `json:"jobs_per_sec"`
	// EndToEndJobsPerSec counts the insert phase too: the jobs over the
	// wall time of the peer's whole benchmark process.
	EndToEndJobsPerSec float64 `json:"end_to_end_jobs_per_sec"`
	WallSeconds        float64 `json:"wall_seconds"`
	// The CPU of the peer's process (user and system) and of the
	// PostgreSQL cluster during its benchmark, in all and per job.
	PeerCPUSeconds     float64 `json:"peer_cpu_seconds"`
	PostgresCPUSeconds float64 `json:"postgres_cpu_seconds"`
	PeerUSPerJob       float64 `json:"peer_us_per_job"`
	PostgresUSPerJob   float64 `json:"postgres_us_per_job"`
	// Comparable and Machine: as a Report's.
	Comparable    bool     `json:"comparable"`
	NotComparable string   `json:"not_comparable_reason,omitempty"`
	Machine       *Machine `json:"machine,omitempty"`
}

// PeerRatio puts a batch run next to a peer's run of the same sitting.
type PeerRatio struct {
	Peer PeerFigures `json:"peer"`
	// Ratio is the batch run's end-to-end tasks/s over the peer's own
	// figure (JobsPerSec); EndToEndRatio over the peer's EndToEndJobsPerSec.
	// WorkRatio, for a batch run with --batch-preload, is its working
	// phase over the peer's: the same phase on both sides.
	Ratio         float64 `json:"ratio"`
	EndToEndRatio float64 `json:"end_to_end_ratio"`
	WorkRatio     float64 `json:"work_ratio,omitempty"`
}

// ratioTo is r's batch throughput over peer's.
func ratioTo(r Report, peer PeerFigures) PeerRatio {
	out := PeerRatio{Peer: peer}
	if peer.JobsPerSec > 0 {
		out.Ratio = round3(r.EndToEndTasksPerSec / peer.JobsPerSec)
	}
	if peer.EndToEndJobsPerSec > 0 {
		out.EndToEndRatio = round3(r.EndToEndTasksPerSec / peer.EndToEndJobsPerSec)
	}
	if peer.JobsPerSec > 0 && r.WorkTasksPerSec > 0 {
		out.WorkRatio = round3(r.WorkTasksPerSec / peer.JobsPerSec)
	}
	return out
}

// parsePeers reads --peer values: name=path, River's alone for now.
func parsePeer(v string) (name, path string, err error) {
	name, path, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(path) == "" {
		return "", "", fmt.Errorf("want name=path, got %q", v)
	}
	if name != peerRiver {
		return "", "", fmt.Errorf("unknown peer %q (known: %s)", name, peerRiver)
	}
	return name, path, nil
}

// peerJobs is how many jobs a peer runs: as many as the batch scenario's
// tasks.
func peerJobs(opts Options) int {
	if opts.Tasks > 0 {
		return opts.Tasks
	}
	return defaultBatchTasks
}

// runPeers runs each peer of opts on a PostgreSQL of its own, started with
// the same settings as the runs' (after them: the machine is theirs), and
// puts each batch report next to it.
func runPeers(ctx context.Context, opts Options, reports []Report, stdout, stderr io.Writer) error {
	direct := opts
	direct.Via = []string{ViaDirect}
	c, err := startCluster(ctx, direct, stderr)
	if err != nil {
		return err
	}
	defer c.stop()
	for _, p := range opts.Peers {
		fig, err := runPeer(ctx, c, p, peerJobs(opts), stderr)
		if err != nil {
			return err
		}
		for i := range reports {
			if reports[i].Scenario == "batch" {
				pr := ratioTo(reports[i], fig)
				reports[i].Peers = append(reports[i].Peers, pr)
				fmt.Fprintf(stdout, "\nscenario batch (%s) against peer %s (same PostgreSQL settings, same sitting)\n", reports[i].Via, fig.Name)
				printPeer(stdout, pr)
			}
		}
	}
	return nil
}

// runPeer runs River's benchmark for jobs jobs in a database of its own on
// c: `river migrate-up`, then `river bench --num-total-jobs`, watching the
// CPU of its process and of the cluster. Its output goes to log.
func runPeer(ctx context.Context, c *cluster, path string, jobs int, log io.Writer) (PeerFigures, error) {
	fig := PeerFigures{Name: peerRiver, Binary: path, Jobs: jobs}
	bin, err := exec.LookPath(path)
	if err != nil {
		return fig, fmt.Errorf("peer river: %w", err)
	}
	fig.Binary = bin
	if out, err := exec.CommandContext(ctx, bin, "version").Output(); err == nil {
		fig.Version, _, _ = strings.Cut(strings.TrimSpace(string(out)), "\n")
	}
	if err := c.createDatabase(ctx, peerDatabase); err != nil {
		return fig, fmt.Errorf("peer river: %w", err)
	}
	defer c.dropDatabase(context.WithoutCancel(ctx), peerDatabase)
	dbURL := c.url(peerDatabase)
	if out, err := exec.CommandContext(ctx, bin, "migrate-up", "--database-url", dbURL).CombinedOutput(); err != nil {
		return fig, fmt.Errorf("peer river: migrate-up: %w: %s", err, bytes.TrimSpace(out))
	}
	parts := &environment{postmasterPID: c.postmasterPID()}
	machine := watchBefore(parts, quietSample)
	machine.Owned = parts.postmasterPID != 0
	fmt.Fprintf(log, "[peer river] %s bench --num-total-jobs %d\n", bin, jobs)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "bench", "--database-url", dbURL, "--num-total-jobs", strconv.Itoa(jobs))
	cmd.Stdout = io.MultiWriter(&out, prefixed(log, "[peer river] "))
	cmd.Stderr = prefixed(log, "[peer river] ")
	start := readCPU(parts)
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return fig, fmt.Errorf("peer river: bench: %w", err)
	}
	wall := time.Since(t0)
	end := readCPU(parts)
	worked, perSec, err := parseRiverBench(out.String())
	if err != nil {
		return fig, fmt.Errorf("peer river: %w", err)
	}
	if worked != jobs {
		return fig, fmt.Errorf("peer river: it worked %d jobs of %d", worked, jobs)
	}
	fig.JobsPerSec = perSec
	fig.WallSeconds = round3(wall.Seconds())
	fig.EndToEndJobsPerSec = round1(float64(jobs) / wall.Seconds())
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		fig.PeerCPUSeconds = round3(timeval(ru.Utime) + timeval(ru.Stime))
	}
	b := start.breakdown(end, int64(jobs))
	fig.PostgresCPUSeconds = b.PostgresSeconds
	fig.PeerUSPerJob = round1(fig.PeerCPUSeconds * 1e6 / float64(jobs))
	fig.PostgresUSPerJob = b.PostgresUSPerTask
	// The peer's process is a child of this one: its CPU counts in the
	// machine's, not in this process's; the rest is other processes'.
	b.OtherSeconds = round3(max(0, b.OtherSeconds-fig.PeerCPUSeconds))
	machine.OtherShareDuring = otherShare(b)
	fig.Machine = &machine
	fig.Comparable, fig.NotComparable = machine.comparable()
	return fig, nil
}

func timeval(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// riverTotal matches the summary line `river bench` prints at its end.
var riverTotal = regexp.MustCompile(`total jobs worked \[\s*(\d+)\s*\].*overall job/sec \[\s*([0-9.]+)\s*\]`)

// parseRiverBench reads the jobs worked and River's jobs/s from `river
// bench`'s output (its last summary line).
func parseRiverBench(out string) (worked int, perSec float64, err error) {
	m := riverTotal.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, 0, fmt.Errorf("no summary line (\"bench: total jobs worked [ ... ], ... overall job/sec [ ... ]\") in river bench's output")
	}
	last := m[len(m)-1]
	worked, _ = strconv.Atoi(last[1])
	perSec, err = strconv.ParseFloat(last[2], 64)
	return worked, perSec, err
}

// printPeer prints a peer's run and, when r is a batch run of the same
// sitting, the ratio.
func printPeer(w io.Writer, p PeerRatio) {
	f := p.Peer
	fmt.Fprintf(w, "  peer %s (%s, %s): %d jobs, %.0f jobs/s (its own figure, working phase), %.0f jobs/s end to end (insert + work, %.1f s)\n",
		f.Name, f.Binary, f.Version, f.Jobs, f.JobsPerSec, f.EndToEndJobsPerSec, f.WallSeconds)
	fmt.Fprintf(w, "  peer CPU per job: %s %.0f µs, postgres %.0f µs\n", f.Name, f.PeerUSPerJob, f.PostgresUSPerJob)
	if !f.Comparable {
		fmt.Fprintf(w, "  !!!!! PEER RUN NOT COMPARABLE: %s !!!!!\n", f.NotComparable)
	}
	if p.Ratio > 0 {
		fmt.Fprintf(w, "  batch end to end / %s: %.2fx (against its end-to-end figure: %.2fx)\n", f.Name, p.Ratio, p.EndToEndRatio)
	}
	if p.WorkRatio > 0 {
		fmt.Fprintf(w, "  batch working phase / %s working phase: %.2fx (both with every task inserted first)\n", f.Name, p.WorkRatio)
	}
}

// prefixed writes each line of what it is given to w with prefix.
func prefixed(w io.Writer, prefix string) io.Writer {
	return &linePrefixer{w: w, prefix: prefix, start: true}
}

type linePrefixer struct {
	w      io.Writer
	prefix string
	start  bool
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	var buf bytes.Buffer
	for _, c := range b {
		if p.start {
			buf.WriteString(p.prefix)
			p.start = false
		}
		buf.WriteByte(c)
		if c == '\n' {
			p.start = true
		}
	}
	if _, err := p.w.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}
