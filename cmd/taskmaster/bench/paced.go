package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// drainPaced is the single scenario's drain at a steady rate: workers take
// one task per tick of a clock at rate per second (a tick no worker is free
// for is skipped, so the load is at most rate) and complete it alone. Claim
// and completion latencies then show the service below saturation.
func drainPaced(ctx context.Context, a *api, queue string, n int64, workers, rate int,
	claims, completes *recorder, completed *atomic.Int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
				default: // every worker is busy: the tick is skipped
				}
			}
		}
	}()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bench-%s-%d", queue, i)
			if err := a.register(ctx, id, queue); err != nil {
				errs <- err
				return
			}
			for completed.Load() < n {
				select {
				case <-ctx.Done():
					return
				case <-ticks:
				}
				t0 := time.Now()
				tasks, err := a.claim(ctx, id, queue, 1, 1000)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if len(tasks) == 0 {
					continue
				}
				claims.add(time.Since(t0))
				t1 := time.Now()
				if err := a.complete(ctx, id, tasks[0]); err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				completes.add(time.Since(t1))
				if completed.Add(1) >= n {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
