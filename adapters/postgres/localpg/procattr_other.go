//go:build !linux

package localpg

import "syscall"

// setParentDeathSignal does nothing: only Linux can signal a child when its parent dies.
func setParentDeathSignal(*syscall.SysProcAttr) {}
