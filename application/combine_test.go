package application

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/ports"
)

// Many goroutines through one combiner: each gets its own answer exactly
// once, batches never hold two requests that do not fit together, no more
// batches run at once than allowed, and concurrent requests share batches.
func TestCombinerAnswersEveryRequestOnceInSharedBatches(t *testing.T) {
	t.Parallel()
	var (
		runningNow, mostRunning, batches, shared atomic.Int64
	)
	c := &combiner[int, int]{
		size: 8, running: 2,
		fits: func(batch []*pending[int, int], p *pending[int, int]) bool {
			for _, q := range batch {
				if q.req%10 == p.req%10 { // "the same task": never in one batch
					return false
				}
			}
			return true
		},
		run: func(ctx context.Context, batch []*pending[int, int]) error {
			n := runningNow.Add(1)
			for {
				m := mostRunning.Load()
				if n <= m || mostRunning.CompareAndSwap(m, n) {
					break
				}
			}
			defer runningNow.Add(-1)
			batches.Add(1)
			if len(batch) > 1 {
				shared.Add(1)
			}
			seen := map[int]bool{}
			for _, p := range batch {
				if seen[p.req%10] {
					return errors.New("two requests that do not fit in one batch")
				}
				seen[p.req%10] = true
				p.res = p.req * 2
			}
			time.Sleep(time.Millisecond) // a transaction's length
			return nil
		},
	}
	const n = 400
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.do(t.Context(), i)
			if err != nil {
				errs <- err
				return
			}
			if res != 2*i {
				errs <- errors.New("someone else's answer")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.LessOrEqual(t, mostRunning.Load(), int64(2))
	require.Less(t, batches.Load(), int64(n), "requests shared batches")
	require.Positive(t, shared.Load())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.queue)
	require.Zero(t, c.leaders, "every lead was given up")
}

// A batch that fails answers each of its requests with the error; a
// request whose context ended before its batch is left out.
func TestCombinerFailsTheBatchAndLeavesOutEndedRequests(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	started := make(chan struct{})
	var calls atomic.Int64
	c := &combiner[string, string]{
		size: 10, running: 1,
		run: func(ctx context.Context, batch []*pending[string, string]) error {
			if calls.Add(1) == 1 {
				close(started)
				<-block
				return nil
			}
			for _, p := range batch {
				require.NotEqual(t, "gone", p.req, "an ended request joined a batch")
			}
			return errors.New("boom")
		},
	}
	first := make(chan error, 1)
	go func() { _, err := c.do(t.Context(), "first"); first <- err }()
	<-started
	gone, cancel := context.WithCancel(t.Context())
	goneErr := make(chan error, 1)
	go func() { _, err := c.do(gone, "gone"); goneErr <- err }()
	others := make(chan error, 2)
	for range 2 {
		go func() { _, err := c.do(t.Context(), "other"); others <- err }()
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 3
	}, 5*time.Second, time.Millisecond)
	cancel()
	close(block)
	require.NoError(t, <-first)
	require.ErrorIs(t, <-goneErr, context.Canceled)
	for range 2 {
		require.EqualError(t, <-others, "boom")
	}
	require.Equal(t, int64(2), calls.Load(), "the two others in one batch")
}

// A second batch runs beside a busy one only once a full batch's worth of
// requests waits; fewer wait for the busy one to end, and then go in one.
func TestCombinerRunsASecondBatchOnlyForAFullOne(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	var (
		started = make(chan int, 4)
		calls   atomic.Int64
		sizes   = make(chan int, 4)
	)
	c := &combiner[int, int]{
		size: 3, running: 2,
		run: func(ctx context.Context, batch []*pending[int, int]) error {
			n := int(calls.Add(1))
			sizes <- len(batch)
			started <- n
			if n == 1 {
				<-block
			}
			return nil
		},
	}
	done := make(chan error, 8)
	do := func(i int) { go func() { _, err := c.do(t.Context(), i); done <- err }() }
	do(0)
	require.Equal(t, 1, <-started)
	queued := func(n int) func() bool {
		return func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return len(c.queue) == n
		}
	}
	do(1)
	do(2)
	require.Eventually(t, queued(2), 5*time.Second, time.Millisecond)
	select {
	case n := <-started:
		t.Fatalf("batch %d started beside the busy one for two waiting requests", n)
	default:
	}
	do(3) // a full batch's worth waits now
	require.Equal(t, 2, <-started, "a second batch runs beside the busy one")
	require.Equal(t, 1, <-sizes)
	require.Equal(t, 3, <-sizes)
	close(block)
	for range 4 {
		require.NoError(t, <-done)
	}
	require.Equal(t, int64(2), calls.Load())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Zero(t, c.leaders, "every lead was given up")
}

// fakeTx runs fn with no stores and counts the runs.
type fakeTx struct{ runs atomic.Int64 }

func (f *fakeTx) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	f.runs.Add(1)
	return fn(ctx, ports.Stores{})
}

// A request that makes the shared transaction fail fails alone: the batch
// is run again one request at a time. Unavailability is not retried that
// way (every request would meet it again).
func TestInOneTransactionIsolatesTheRequestThatFailsIt(t *testing.T) {
	t.Parallel()
	batch := func(reqs ...string) []*pending[string, string] {
		out := make([]*pending[string, string], len(reqs))
		for i, r := range reqs {
			out[i] = &pending[string, string]{ctx: t.Context(), req: r}
		}
		return out
	}
	serve := func(fail error) func(ctx context.Context, st ports.Stores, b []*pending[string, string]) error {
		return func(_ context.Context, _ ports.Stores, b []*pending[string, string]) error {
			for _, p := range b {
				p.res, p.err = "", nil
				if p.req == "bad" {
					return fail
				}
				p.res = "ok:" + p.req
			}
			return nil
		}
	}
	tx := &fakeTx{}
	b := batch("a", "bad", "c")
	require.NoError(t, inOneTransaction(t.Context(), tx, b, serve(errors.New("bad statement"))))
	require.Equal(t, int64(4), tx.runs.Load(), "the batch, then each alone")
	require.Equal(t, "ok:a", b[0].res)
	require.EqualError(t, b[1].err, "bad statement")
	require.Equal(t, "ok:c", b[2].res)

	tx = &fakeTx{}
	b = batch("a", "bad")
	require.ErrorIs(t, inOneTransaction(t.Context(), tx, b, serve(ports.ErrUnavailable)), ports.ErrUnavailable)
	require.Equal(t, int64(1), tx.runs.Load())
}

// With overlapAt 1 a request that finds a batch running starts another at
// once, up to running (the rule before batches had to fill).
func TestCombinerOverlapsAtOnceWhenAsked(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	started := make(chan int, 2)
	var calls atomic.Int64
	c := &combiner[int, int]{
		size: 8, running: 2, overlapAt: 1,
		run: func(ctx context.Context, batch []*pending[int, int]) error {
			n := int(calls.Add(1))
			started <- n
			if n == 1 {
				<-block
			}
			return nil
		},
	}
	done := make(chan error, 2)
	for i := range 2 {
		go func() { _, err := c.do(t.Context(), i); done <- err }()
		require.Equal(t, i+1, <-started, "batch %d starts at once", i+1)
	}
	close(block)
	for range 2 {
		require.NoError(t, <-done)
	}
}

// batchLog records the batches a combiner reports.
type batchLog struct {
	mu      sync.Mutex
	batches []observedBatch
}

type observedBatch struct {
	kind   string
	waited []time.Duration
	ran    time.Duration
}

func (l *batchLog) ObserveBatch(kind string, waited []time.Duration, ran time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, observedBatch{kind, waited, ran})
}

// An observed combiner reports each batch once, after answering it: its
// requests' waits for it to start (a request that came while another batch
// ran waited for that one) and how long it ran.
func TestCombinerReportsEveryBatchWithItsWaitsAndRunTime(t *testing.T) {
	t.Parallel()
	const hold = 30 * time.Millisecond
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	log := &batchLog{}
	c := &combiner[int, int]{
		size: 8, running: 1, observe: log, kind: "claim",
		run: func(ctx context.Context, batch []*pending[int, int]) error {
			if batch[0].req == 0 {
				started <- struct{}{}
				<-release // the first batch runs until the others queue
			}
			for _, p := range batch {
				p.res = p.req
			}
			return nil
		},
	}
	var wg sync.WaitGroup
	ask := func(n int) {
		wg.Go(func() {
			got, err := c.do(context.Background(), n)
			require.NoError(t, err)
			require.Equal(t, n, got)
		})
	}
	ask(0)
	<-started
	for n := 1; n <= 3; n++ {
		ask(n)
	}
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == 3
	}, 5*time.Second, time.Millisecond)
	time.Sleep(hold)
	close(release)
	wg.Wait()

	log.mu.Lock()
	defer log.mu.Unlock()
	require.Len(t, log.batches, 2)
	first, second := log.batches[0], log.batches[1]
	require.Equal(t, "claim", first.kind)
	require.Len(t, first.waited, 1)
	require.GreaterOrEqual(t, first.ran, hold, "the first batch ran while the others queued")
	require.Len(t, second.waited, 3)
	for _, w := range second.waited {
		require.GreaterOrEqual(t, w, hold, "they waited for the first batch to end")
	}
	require.Less(t, second.ran, first.ran)
}
