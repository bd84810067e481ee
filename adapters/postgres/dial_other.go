//go:build !linux

package postgres

import (
	"syscall"
	"time"
)

// userTimeoutControl returns nil where TCP_USER_TIMEOUT is not available:
// keepalive probes (set on every platform) still close a connection whose
// peer stopped answering, and the server applies its own tcp_user_timeout.
func userTimeoutControl(time.Duration) func(network, address string, c syscall.RawConn) error {
	return nil
}
