package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Throughput is only comparable between runs on a quiet machine: the same
// commit gave 10,139 tasks/s alone and 3,984 with other work taking half of
// the machine, at the same CPU per task. So every report says whether its
// run had the machine to itself: the load average and the CPU other
// processes used just before it started, and the CPU they used while it ran.

// maxOtherShare is the share of the machine (all cores) that processes
// other than the server, PostgreSQL and the load generator may take, before
// or during a run, for the run to count as comparable.
const maxOtherShare = 0.05

// quietSample is how long the machine is watched before a run.
const quietSample = time.Second

// Machine describes the machine around one run: how busy it was before the
// run started and during it, and whether that leaves the run's throughput
// comparable with other runs.
type Machine struct {
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute load averages read
	// before the run (it counts the benchmark's own earlier runs too).
	LoadAverage [3]float64 `json:"load_average_before"`
	// OtherShareBefore is the share of the machine's CPU (all cores) that
	// other processes used in the second before the run started.
	OtherShareBefore float64 `json:"other_cpu_share_before"`
	// OtherShareDuring is that share while the run went on.
	OtherShareDuring float64 `json:"other_cpu_share_during"`
	// Owned says the benchmark started the server and PostgreSQL itself:
	// only then can it tell their CPU from other processes'.
	Owned bool `json:"owned"`
}

// comparable reports whether a run on m may be compared with other runs,
// and why not.
func (m Machine) comparable() (bool, string) {
	switch {
	case !m.Owned:
		return false, "the benchmark did not start the server and PostgreSQL (--url), so it cannot tell their CPU from other processes'"
	case m.OtherShareBefore > maxOtherShare:
		return false, fmt.Sprintf("other processes took %.1f%% of the machine just before the run (limit %.0f%%)", 100*m.OtherShareBefore, 100*maxOtherShare)
	case m.OtherShareDuring > maxOtherShare:
		return false, fmt.Sprintf("other processes took %.1f%% of the machine during the run (limit %.0f%%)", 100*m.OtherShareDuring, 100*maxOtherShare)
	}
	return true, ""
}

// otherShare is the share of the machine's capacity that processes other
// than the measured parts used in b.
func otherShare(b *CPUBreakdown) float64 {
	if b == nil || b.Cores == 0 || b.WallSeconds <= 0 {
		return 0
	}
	return round3(b.OtherSeconds / (float64(b.Cores) * b.WallSeconds))
}

// watchBefore reads the load average and watches the machine for d: the
// CPU that processes other than env's parts (and this one) used meanwhile.
func watchBefore(env *environment, d time.Duration) Machine {
	var m Machine
	m.LoadAverage, _ = loadAverage()
	start := readCPU(env)
	time.Sleep(d) // a measurement window, not synchronisation
	m.OtherShareBefore = otherShare(start.breakdown(readCPU(env), 0))
	m.Owned = env.serverPID != 0 && env.postmasterPID != 0
	return m
}

// loadAverage reads the 1, 5 and 15 minute load averages.
func loadAverage() ([3]float64, error) {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out, err
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return out, errors.New("unexpected /proc/loadavg format")
	}
	for i := range out {
		if out[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return out, fmt.Errorf("unexpected /proc/loadavg format: %w", err)
		}
	}
	return out, nil
}

// judge fills r's comparability from m and the CPU the run used.
func judge(r *Report, m Machine) {
	m.OtherShareDuring = otherShare(r.CPU)
	r.Machine = &m
	r.Comparable, r.NotComparable = m.comparable()
}

// printComparability prints the machine's figures and, for a run that is
// not comparable, a line nobody can miss.
func printComparability(w io.Writer, r Report) {
	m := r.Machine
	if m == nil {
		return
	}
	fmt.Fprintf(w, "  machine:          load average before %.2f %.2f %.2f; other processes %.1f%% of the machine before, %.1f%% during\n",
		m.LoadAverage[0], m.LoadAverage[1], m.LoadAverage[2], 100*m.OtherShareBefore, 100*m.OtherShareDuring)
	if !r.Comparable {
		fmt.Fprintf(w, "  !!!!! NOT COMPARABLE: %s. Its throughput and latencies say little; CPU per task less so. !!!!!\n", r.NotComparable)
	}
}
