package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// CPUBreakdown is where a scenario's CPU went: the server process, the
// PostgreSQL cluster (the postmaster, every backend and background process,
// and the ones that exited meanwhile), the load generator (this process),
// and the whole machine (which also counts whatever else ran: on a shared
// machine, Other is the noise the figures suffered). Per-task figures divide
// by the tasks the scenario finished.
type CPUBreakdown struct {
	ServerSeconds   float64 `json:"server_seconds"`
	PostgresSeconds float64 `json:"postgres_seconds"`
	LoadGenSeconds  float64 `json:"load_generator_seconds"`
	MachineSeconds  float64 `json:"machine_seconds"`
	OtherSeconds    float64 `json:"other_seconds"`
	WallSeconds     float64 `json:"wall_seconds"`
	Cores           int     `json:"cores"`
	// FinishedTasks is what the per-task figures divide by.
	FinishedTasks     int64   `json:"finished_tasks"`
	ServerUSPerTask   float64 `json:"server_us_per_task,omitempty"`
	PostgresUSPerTask float64 `json:"postgres_us_per_task,omitempty"`
	LoadGenUSPerTask  float64 `json:"load_generator_us_per_task,omitempty"`
}

// cpuReading is one reading of the cumulative CPU seconds of each part.
type cpuReading struct {
	at                                 time.Time
	server, postgres, loadgen, machine float64
}

// readCPU reads every part's cumulative CPU time now. A part that cannot be
// read (the server is not ours, /proc is missing) reads as 0.
func readCPU(env *environment) cpuReading {
	r := cpuReading{at: time.Now()}
	if env.serverPID != 0 {
		r.server, _ = processCPU(env.serverPID)
	}
	if env.postmasterPID != 0 {
		r.postgres, _ = clusterCPU(env.postmasterPID)
	}
	r.loadgen, _ = processCPU(os.Getpid())
	r.machine, _ = machineBusy()
	return r
}

// breakdown is the CPU spent between start and end, per finished task.
func (start cpuReading) breakdown(end cpuReading, finished int64) *CPUBreakdown {
	b := &CPUBreakdown{
		ServerSeconds:   round3(end.server - start.server),
		PostgresSeconds: round3(end.postgres - start.postgres),
		LoadGenSeconds:  round3(end.loadgen - start.loadgen),
		MachineSeconds:  round3(end.machine - start.machine),
		WallSeconds:     round3(end.at.Sub(start.at).Seconds()),
		Cores:           numCPU(),
		FinishedTasks:   finished,
	}
	b.OtherSeconds = round3(max(0, b.MachineSeconds-b.ServerSeconds-b.PostgresSeconds-b.LoadGenSeconds))
	if finished > 0 {
		per := func(s float64) float64 { return round1(s * 1e6 / float64(finished)) }
		b.ServerUSPerTask, b.PostgresUSPerTask, b.LoadGenUSPerTask = per(b.ServerSeconds), per(b.PostgresSeconds), per(b.LoadGenSeconds)
	}
	return b
}

// printCPU prints b in the report.
func printCPU(w io.Writer, b *CPUBreakdown) {
	if b == nil {
		return
	}
	fmt.Fprintf(w, "  CPU (s):          server %.1f, postgres %.1f, load generator %.1f; machine %.1f of %.0f available (%d cores x %.1f s), other processes %.1f\n",
		b.ServerSeconds, b.PostgresSeconds, b.LoadGenSeconds, b.MachineSeconds, float64(b.Cores)*b.WallSeconds, b.Cores, b.WallSeconds, b.OtherSeconds)
	if b.FinishedTasks > 0 {
		fmt.Fprintf(w, "  CPU per task:     server %.0f µs, postgres %.0f µs, load generator %.0f µs (%d tasks)\n",
			b.ServerUSPerTask, b.PostgresUSPerTask, b.LoadGenUSPerTask, b.FinishedTasks)
	}
}

// clusterCPU is the CPU seconds of a PostgreSQL cluster: its postmaster,
// the postmaster's children, and the children that exited (which the
// postmaster reaped: its cutime and cstime).
func clusterCPU(postmaster int) (float64, error) {
	ticks, err := clusterTicks(postmaster, procStat, procPIDs)
	return ticks / clockTicks, err
}

// clusterTicks sums, in clock ticks, the CPU of the postmaster, of its
// children read by stat from the pids list lists, and of the children it
// reaped. A child the postmaster reaps while the children are being read
// has left the list and not yet reached the postmaster's reaped time read
// before: its whole life would go missing (all of a peer's backends, when
// the peer's benchmark has just closed its connections). So the reaped
// time is read again after the children, and the reading repeated when it
// moved.
func clusterTicks(postmaster int, stat func(int) ([]string, error), pids func() ([]int, error)) (float64, error) {
	want := strconv.Itoa(postmaster)
	for attempt := 0; ; attempt++ {
		f, err := stat(postmaster)
		if err != nil {
			return 0, err
		}
		reaped := ticks(f, 13) + ticks(f, 14)
		total := ticks(f, 11) + ticks(f, 12) + reaped
		all, err := pids()
		if err != nil {
			return 0, err
		}
		for _, pid := range all {
			if pid == postmaster {
				continue
			}
			g, err := stat(pid)
			if err != nil || len(g) < 2 || g[1] != want { // field 4, the parent
				continue
			}
			total += ticks(g, 11) + ticks(g, 12)
		}
		f, err = stat(postmaster)
		if err != nil {
			return 0, err
		}
		if ticks(f, 13)+ticks(f, 14) == reaped || attempt == 9 {
			return total, nil
		}
	}
}

// procPIDs lists the processes in /proc.
func procPIDs() ([]int, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, len(dirs))
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// procStat returns the fields of /proc/pid/stat after the command name
// (field 3, the state, first).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return nil, errors.New("unexpected /proc stat format")
	}
	return f, nil
}

func ticks(f []string, i int) float64 {
	v, _ := strconv.ParseFloat(f[i], 64)
	return v
}

// clockTicks is USER_HZ on Linux.
const clockTicks = 100

// machineBusy is the CPU seconds every core spent not idle since boot.
func machineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat format")
	}
	var busy float64
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest time is already in user
			break
		}
		busy += n
	}
	return busy / clockTicks, nil
}

func numCPU() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}

// postmasterPID reads the postmaster's pid from a data directory.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}
