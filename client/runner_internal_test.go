package client

import (
	"context"
	"testing"
)

// A handler whose context a halt cancelled returns at once; the runner must
// then already see the halt, or it reports the outcome of a task it lost
// (seen under load: a lost task's failure sent, and refused as lease-lost).
func TestAHaltIsVisibleBeforeTheHandlersContextEnds(t *testing.T) {
	t.Parallel()
	for i := range 10000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		j := &job{cancel: cancel, stop: make(chan struct{})}
		seen := make(chan error)
		go func() {
			<-ctx.Done()
			seen <- j.halted()
		}()
		j.halt(ErrTaskLost)
		if err := <-seen; err != ErrTaskLost {
			t.Fatalf("run %d: the handler's context ended before the halt was visible (halted() = %v)", i, err)
		}
	}
}
