// Package lifecycle is the one start/stop discipline every long-running
// service of Taskmaster follows (the HTTP server, the background jobs, the
// outbox router and janitor, the notification listener, the event stream
// reader). A service embeds Base and calls StartLoop and StopLoop from its own
// Start and Stop:
//
//   - Start runs the service's preparation synchronously (open a listener,
//     connect), then its loop in one goroutine, on a context of its own that
//     only Stop cancels: the context given to Start bounds the start alone
//     (fx's start context expires after the start timeout).
//   - Stop cancels that context and waits for the goroutine to return. It is
//     safe to call before Start, twice, or concurrently; once it has
//     returned without error the service may be started again.
//   - Starting a running service is an error, never a second goroutine.
//
// It imports only the standard library, so adapters and use cases alike can
// build on it.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrAlreadyStarted is returned by Start on a service that runs.
var ErrAlreadyStarted = errors.New("already started")

// Service is what every long-running service offers. Both methods fit fx
// lifecycle hooks.
type Service interface {
	// Start starts the service and returns once it runs (or failed to).
	Start(ctx context.Context) error
	// Stop stops the service and waits for it, up to ctx. It is safe to call
	// before Start and more than once.
	Stop(ctx context.Context) error
}

// LoopFunc is a service's loop: it runs until ctx is cancelled, then
// returns.
type LoopFunc func(ctx context.Context)

// StartFunc prepares a service with the start context and returns its loop.
// An error leaves the service stopped.
type StartFunc func(startCtx context.Context) (LoopFunc, error)

// Base is the state of one service's run. The zero value is a stopped
// service.
type Base struct {
	// mu serialises Start and Stop.
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// StartLoop starts the service: prepare runs now, with startCtx, and the loop
// it returns runs in a goroutine on a context that only StopLoop cancels.
// name prefixes its errors.
func (b *Base) StartLoop(startCtx context.Context, name string, prepare StartFunc) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		select {
		case <-b.done: // a stop that timed out has since finished
			b.cancel, b.done = nil, nil
		default:
			return fmt.Errorf("%s: %w", name, ErrAlreadyStarted)
		}
	}
	if err := startCtx.Err(); err != nil {
		return fmt.Errorf("%s: start: %w", name, err)
	}
	loop, err := prepare(startCtx)
	if err != nil {
		return fmt.Errorf("%s: start: %w", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		loop(ctx)
	}()
	return nil
}

// StopLoop cancels the loop's context and waits for the loop to return, or
// for ctx to end (then it returns ctx's error and the loop goes on stopping;
// a later StopLoop waits again). Calling it before StartLoop, or again, does
// nothing.
func (b *Base) StopLoop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return nil
	}
	b.cancel()
	select {
	case <-b.done:
		b.cancel, b.done = nil, nil
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop: %w", ctx.Err())
	}
}

// Running reports whether the loop is running (started and not yet
// returned).
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}
