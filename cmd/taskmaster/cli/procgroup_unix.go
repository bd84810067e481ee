//go:build unix

package cli

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the command in its own process group, so a
// terminal's Ctrl-C reaches only the worker (which then drains) and a stop
// reaches the whole pipeline the shell started.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends SIGTERM (or SIGKILL when kill) to the command's process
// group.
func signalGroup(cmd *exec.Cmd, kill bool) error {
	if cmd.Process == nil {
		return nil
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-cmd.Process.Pid, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}
