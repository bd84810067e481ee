package bench

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeProc is a postmaster (pid 10) with live children and reaped time, as
// /proc shows them; reapDuringScan makes the postmaster reap child 11 (500
// ticks) right after its own stat was read the first time, before the
// children are listed: the moment a peer's benchmark has just closed its
// connections.
type fakeProc struct {
	reaped         int // the postmaster's cutime
	children       map[int]int
	reapDuringScan bool
	statReads      int
}

func (p *fakeProc) stat(pid int) ([]string, error) {
	// fields from the state on: state ppid pgrp ... utime(11) stime(12) cutime(13) cstime(14)
	line := func(ppid, utime, cutime int) []string {
		f := strings.Fields(fmt.Sprintf("S %d 0 0 0 0 0 0 0 0 0 %d 0 %d 0", ppid, utime, cutime))
		return f
	}
	if pid == 10 {
		p.statReads++
		f := line(1, 100, p.reaped)
		if p.reapDuringScan && p.statReads == 1 {
			p.reaped += p.children[11]
			delete(p.children, 11)
		}
		return f, nil
	}
	t, ok := p.children[pid]
	if !ok {
		return nil, os.ErrNotExist
	}
	return line(10, t, 0), nil
}

func (p *fakeProc) pids() ([]int, error) {
	out := []int{1, 10, 99}
	for pid := range p.children {
		out = append(out, pid)
	}
	return out, nil
}

func TestClusterTicksCountsAChildReapedWhileTheChildrenAreRead(t *testing.T) {
	steady := &fakeProc{reaped: 40, children: map[int]int{11: 500, 12: 7}}
	got, err := clusterTicks(10, steady.stat, steady.pids)
	require.NoError(t, err)
	require.Equal(t, float64(100+40+500+7), got)

	racing := &fakeProc{reaped: 40, children: map[int]int{11: 500, 12: 7}, reapDuringScan: true}
	got, err = clusterTicks(10, racing.stat, racing.pids)
	require.NoError(t, err)
	require.Equal(t, float64(100+40+500+7), got, "the reaped child's ticks moved to the postmaster's reaped time, not away")
}

// On the real /proc: a shell whose child burns CPU and exits is read with
// its child, and after it reaped the child, with the same CPU in all.
func TestClusterCPUFollowsChildrenIntoTheReapedTime(t *testing.T) {
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; sleep 5`)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	var before float64
	for time.Now().Before(deadline) {
		v, err := clusterCPU(cmd.Process.Pid)
		require.NoError(t, err)
		if v > 0.05 {
			before = v
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Positive(t, before, "the busy child's CPU is read while it runs")
	f, err := procStat(cmd.Process.Pid)
	require.NoError(t, err)
	for ticks(f, 13)+ticks(f, 14) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		f, err = procStat(cmd.Process.Pid)
		require.NoError(t, err)
	}
	after, err := clusterCPU(cmd.Process.Pid)
	require.NoError(t, err)
	require.GreaterOrEqual(t, after, before, "a reaped child's CPU stays counted")
}
