package localpg

import "syscall"

// setParentDeathSignal asks the kernel to send the postmaster SIGINT (a fast shutdown) when the
// process that started it dies without calling Stop, e.g. a test binary killed by -timeout.
func setParentDeathSignal(attr *syscall.SysProcAttr) {
	attr.Pdeathsig = syscall.SIGINT
}
