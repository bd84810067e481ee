//go:build !unix

package cli

import (
	"os"
	"os/exec"
	"time"
)

// stopSignals drain the worker; a second one stops it at once.
var stopSignals = []os.Signal{os.Interrupt}

// group stands for a command's process group where there are none: a stop
// kills the command's process alone.
type group struct{ cmd *exec.Cmd }

func newGroup() (*group, error) { return &group{}, nil }

func (g *group) join(cmd *exec.Cmd) { g.cmd = cmd }

func (g *group) stop(time.Duration, <-chan struct{}) {
	if g.cmd != nil && g.cmd.Process != nil {
		_ = g.cmd.Process.Kill()
	}
}

func (g *group) close() {}
