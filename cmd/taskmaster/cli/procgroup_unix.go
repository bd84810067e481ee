//go:build unix

package cli

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// stopSignals drain the worker; a second one stops it at once. SIGHUP is
// one: a worker whose terminal closes must not die and leave its commands
// running.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// guardScript is the leader of a command's process group: it waits for
// end-of-file on its standard input, a pipe whose writing end only the
// worker holds, and then kills its whole group. The kernel closes that end
// when the worker dies, however it dies (SIGKILL included), so a command
// never outlives its worker; an ordinary stop signals the group, which
// ends the guard with the rest.
const guardScript = `read _; kill -9 0`

// group is the process group one command runs in, so that a stop reaches
// the whole pipeline the shell started, and a terminal's Ctrl-C reaches
// only the worker (which then drains).
type group struct {
	guard    *exec.Cmd
	lifeline *os.File // the guard's standard input, written by nobody
	pgid     int
	reaped   chan struct{} // closed once the guard was waited for
}

// newGroup starts the guard of a new process group.
func newGroup() (*group, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	guard := exec.Command("/bin/sh", "-c", guardScript)
	guard.Stdin = r
	guard.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = guard.Start()
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	g := &group{guard: guard, lifeline: w, pgid: guard.Process.Pid, reaped: make(chan struct{})}
	go func() {
		_ = guard.Wait()
		close(g.reaped)
	}()
	return g, nil
}

// join makes cmd start in the group.
func (g *group) join(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: g.pgid}
}

// signal sends sig to every process of the group.
func (g *group) signal(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
}

// empty reports whether no process of the group is left (zombies of the
// worker's own children count until they are waited for).
func (g *group) empty() bool {
	return syscall.Kill(-g.pgid, 0) == syscall.ESRCH
}

// stop ends every process of the group: SIGTERM, then SIGKILL once grace
// passed or force is closed (at once when it is already). It returns once
// the group is empty, or a second after the SIGKILL (a process init has
// not reaped yet).
func (g *group) stop(grace time.Duration, force <-chan struct{}) {
	if g.empty() {
		return
	}
	select {
	case <-force:
	default:
		g.signal(syscall.SIGTERM)
		if g.waitEmpty(grace, force) {
			return
		}
	}
	g.signal(syscall.SIGKILL)
	g.waitEmpty(time.Second, nil)
}

// waitEmpty polls for an empty group up to d, or until force closes; it
// reports whether the group is empty.
func (g *group) waitEmpty(d time.Duration, force <-chan struct{}) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !g.empty() {
		select {
		case <-deadline.C:
			return false
		case <-force:
			return false
		case <-tick.C:
		}
	}
	return true
}

// close lets the guard go: closing the lifeline makes it kill whatever is
// left of the group, and it is waited for.
func (g *group) close() {
	g.lifeline.Close()
	<-g.reaped
}
