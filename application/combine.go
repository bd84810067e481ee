package application

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/taskmaster/taskmaster/ports"
)

// combiner serves concurrent requests in batches, one transaction per
// batch (group commit without timers): a request that finds no batch in
// progress runs one at once, taking along every request queued meanwhile
// (up to a batch's size); a request that finds one busy waits, and the
// first waiting request when it finishes leads the next batch. Another
// batch runs beside it, up to `running` at once, only while `overlapAt`
// requests wait (by default a full batch): more transactions at once would
// serve fewer requests each, and every transaction costs its fixed
// statements and its commit (on two cores, two claim transactions of three
// requests cost a quarter more database CPU per task than one of six:
// docs/performance.md).
// An idle instance adds no delay; a busy one serves as many requests per
// transaction as arrived during the previous one.
//
// Every request is answered only when its batch's transaction has ended:
// with its own result when it committed, with the batch's error when it
// did not (nothing of it was saved). A request whose context ends before
// its batch starts is answered with the context's error and left out. The
// batch runs under a context without the leader's cancellation, so one
// client going away does not fail the others' work.
type combiner[Req, Res any] struct {
	// run serves a batch; it returns one result per request, in order, or
	// an error for all of them.
	run func(ctx context.Context, reqs []*pending[Req, Res]) error
	// fits reports whether req may join batch (nil: always); a request that
	// does not waits for a later batch.
	fits func(batch []*pending[Req, Res], req *pending[Req, Res]) bool
	// size bounds a batch's requests, running the batches at once;
	// overlapAt is how many requests must wait before another batch runs
	// beside the running ones (0: size).
	size, running, overlapAt int
	// observe, when not nil, is told of every batch as kind.
	observe ports.BatchObserver
	kind    string

	mu      sync.Mutex
	queue   []*pending[Req, Res]
	leaders int
}

// pending is one request waiting in a combiner, and then its answer.
type pending[Req, Res any] struct {
	ctx  context.Context
	req  Req
	res  Res
	err  error
	done chan struct{}
	// lead holds a token while this request is to lead a batch.
	lead chan struct{}
	// arrived is when the request came (set when batches are observed).
	arrived time.Time
}

// do serves req in a batch and returns its result.
func (c *combiner[Req, Res]) do(ctx context.Context, req Req) (Res, error) {
	p := &pending[Req, Res]{ctx: ctx, req: req, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	if c.observe != nil {
		p.arrived = time.Now()
	}
	c.mu.Lock()
	c.queue = append(c.queue, p)
	if c.leaders == 0 || (c.leaders < c.running && len(c.queue) >= c.overlap()) {
		c.leaders++
		p.lead <- struct{}{}
	}
	c.mu.Unlock()
	for {
		select {
		case <-p.done:
			c.mu.Lock()
			select {
			case <-p.lead: // handed the lead as another batch took it along
				c.handOver()
			default:
			}
			c.mu.Unlock()
			return p.res, p.err
		case <-p.lead:
			c.lead(ctx)
		}
	}
}

// overlap is how many requests must wait before another batch runs beside
// the running ones.
func (c *combiner[Req, Res]) overlap() int {
	if c.overlapAt <= 0 {
		return c.size
	}
	return c.overlapAt
}

// lead runs one batch, then hands the lead on.
func (c *combiner[Req, Res]) lead(ctx context.Context) {
	if batch := c.take(); len(batch) > 0 {
		var start time.Time
		if c.observe != nil {
			start = time.Now()
		}
		if err := c.run(context.WithoutCancel(ctx), batch); err != nil {
			for _, p := range batch {
				p.err = err
			}
		}
		var ran time.Duration
		if c.observe != nil {
			ran = time.Since(start)
		}
		for _, p := range batch {
			close(p.done)
		}
		if c.observe != nil { // after the answers: they need not wait for it
			waited := make([]time.Duration, len(batch))
			for i, p := range batch {
				waited[i] = start.Sub(p.arrived)
			}
			c.observe.ObserveBatch(c.kind, waited, ran)
		}
	}
	c.mu.Lock()
	c.handOver()
	c.mu.Unlock()
}

// handOver gives the lead to the first waiting request that has none, or
// gives it up: when none waits, and when another batch runs and fewer than
// overlap requests wait (that one's leader hands over when it ends).
// The caller holds c.mu.
func (c *combiner[Req, Res]) handOver() {
	if c.leaders > 1 && len(c.queue) < c.overlap() {
		c.leaders--
		return
	}
	for _, p := range c.queue {
		select {
		case p.lead <- struct{}{}:
			return
		default: // it leads already
		}
	}
	c.leaders--
}

// take removes a batch from the queue: the requests that fit, in arrival
// order. Requests whose context ended are answered and dropped.
func (c *combiner[Req, Res]) take() []*pending[Req, Res] {
	c.mu.Lock()
	defer c.mu.Unlock()
	var batch, rest []*pending[Req, Res]
	for _, p := range c.queue {
		switch {
		case p.ctx.Err() != nil:
			p.err = p.ctx.Err()
			close(p.done)
		case len(batch) < c.size && (len(batch) == 0 || c.fits == nil || c.fits(batch, p)):
			batch = append(batch, p)
		default:
			rest = append(rest, p)
		}
	}
	c.queue = rest
	return batch
}

// inOneTransaction runs fn over the whole batch in one transaction. When
// that fails for a reason other than the database's availability (or the
// batch's context), it runs fn again for each request alone, so that no
// request fails for another's sake; each request's error is then its own.
// fn must set every request's answer (it runs again on a retry).
//
// The transaction carries the correlation id of its request when it serves
// one, and none when it serves several (fn stamps each request's events
// with its own).
func inOneTransaction[Req, Res any](ctx context.Context, tx ports.TxRunner, batch []*pending[Req, Res],
	fn func(ctx context.Context, st ports.Stores, batch []*pending[Req, Res]) error) error {
	err := tx.Run(correlatedWith(ctx, batch), func(ctx context.Context, st ports.Stores) error { return fn(ctx, st, batch) })
	if err == nil || len(batch) == 1 || errors.Is(err, ports.ErrUnavailable) || ctx.Err() != nil {
		return err
	}
	for _, p := range batch {
		one := []*pending[Req, Res]{p}
		if err := tx.Run(correlatedWith(ctx, one), func(ctx context.Context, st ports.Stores) error { return fn(ctx, st, one) }); err != nil {
			p.err = err
		}
	}
	return nil
}

// correlatedWith returns ctx carrying the correlation id of batch's request
// when it holds one request, and no correlation id when it holds several.
func correlatedWith[Req, Res any](ctx context.Context, batch []*pending[Req, Res]) context.Context {
	if len(batch) == 1 {
		return ports.WithCorrelationID(ctx, ports.CorrelationID(batch[0].ctx))
	}
	return ports.WithCorrelationID(ctx, "")
}
