package postgres

import (
	"fmt"
	"strings"
	"syscall"
	"time"
)

// tcpUserTimeout is TCP_USER_TIMEOUT (include/uapi/linux/tcp.h), the same on
// every Linux architecture; the syscall package lacks it on some.
const tcpUserTimeout = 0x12

// userTimeoutControl sets TCP_USER_TIMEOUT on TCP sockets before they
// connect: data unacknowledged for d (or, with keepalives, a peer silent for
// d) closes the connection instead of blocking until the kernel's default
// retransmission limit (about 15 minutes).
func userTimeoutControl(d time.Duration) func(network, address string, c syscall.RawConn) error {
	ms := int(d.Milliseconds())
	return func(network, _ string, c syscall.RawConn) error {
		if !strings.HasPrefix(network, "tcp") {
			return nil // a Unix socket has no TCP timers
		}
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout, ms)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("set TCP_USER_TIMEOUT: %w", serr)
		}
		return nil
	}
}
