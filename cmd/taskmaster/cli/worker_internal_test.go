package cli

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
)

// Whatever a command prints, the worker keeps at most maxStdout bytes of
// it: a real command printing 64 MiB fails with the documented error, and
// handling it allocates a small fraction of that (the cap was bypassed by
// bytes.Buffer's ReadFrom, which os/exec uses to copy a pipe).
func TestExecOutputIsCappedWithARealCommand(t *testing.T) {
	// Not parallel: it measures this process's allocations.
	h := &execHandler{command: "head -c 67108864 /dev/zero", forced: make(chan struct{})}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := h.handle(context.Background(), client.Task{ID: "t", Queue: "q", Payload: []byte(`{}`)})
	runtime.ReadMemStats(&after)
	require.EqualError(t, err, "command output exceeds 1048576 bytes")
	require.True(t, client.IsNonRetryable(err))
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "bytes allocated while handling 64 MiB of output")
}
