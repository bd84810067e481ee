package bench

import (
	"context"
	"time"
)

// paceAt ticks rate times per second until ctx ends, for drain's workers to
// claim one task per tick: a tick no worker is free for is skipped, so the
// load is at most rate, and claim latencies show the service below
// saturation (the single scenario's --single-rate).
func paceAt(ctx context.Context, rate int) <-chan struct{} {
	ticks := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case ticks <- struct{}{}:
				default: // every worker is busy
				}
			}
		}
	}()
	return ticks
}
