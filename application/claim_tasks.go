package application

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Claim hands up to cmd.Limit (default 1) claimable tasks to a registered,
// non-DEAD worker, each RUNNING under a fresh lease of cmd.LeaseSeconds (the
// configured default when absent), stopping before the response byte cap
// (Config.MaxResponseBytes; at least one task). The claim counts as the
// worker's sign of life. A claim with cmd.RequestID that the worker already
// made, and from which it still holds tasks, answers with those tasks (same
// leases) and claims nothing; once it holds none of them, the claim is made
// anew. With cmd.WaitMillis set, an empty claim waits for a notification (or
// polls) until a task is claimable or the wait is over; it holds no
// database connection while it waits. A draining worker gets no new tasks:
// its claim answers like a claim on empty queues (after the wait, so a
// worker that does not read its heartbeats does not spin).
func (s *TaskService) Claim(ctx context.Context, cmd ports.ClaimCommand) (ports.ClaimResult, error) {
	c, err := s.claimOf(cmd)
	if err != nil {
		return ports.ClaimResult{}, err
	}
	p := ports.Principal(ctx)
	if err := p.CheckWorkerID(c.workerID); err != nil {
		return ports.ClaimResult{}, err
	}
	if c.queue != "" {
		if err := p.CheckQueue(c.queue); err != nil {
			return ports.ClaimResult{}, err
		}
	}
	if c.reports, c.completed, err = s.claimReports(ctx, cmd); err != nil {
		return ports.ClaimResult{}, err
	}
	if c.wait == 0 {
		out, err := s.claimOnce(ctx, c)
		if err != nil {
			return ports.ClaimResult{}, err
		}
		return withReported(out.result, c, out.reported), nil
	}
	return s.claimWaiting(ctx, c)
}

// withReported is res with the outcomes of claim c's reports.
func withReported(res ports.ClaimResult, c claim, reported []ports.TaskResult) ports.ClaimResult {
	if c.reports != nil {
		res.Completed, res.Failed = reported[:c.completed:c.completed], reported[c.completed:]
		if c.completed == 0 {
			res.Completed = nil
		}
		if len(res.Failed) == 0 {
			res.Failed = nil
		}
	}
	return res
}

// claim is a validated ClaimCommand with its defaults filled in.
type claim struct {
	workerID     string
	queue        string
	limit        int
	wait         time.Duration
	leaseSeconds int
	requestID    string
	maxBytes     int64
	// again marks a waiting claim's later attempts: they give no sign of
	// life (the request's first attempt did), so waiting writes nothing.
	again bool
	// push marks a push dispatcher's claim (ports.ClaimCommand.Push).
	push bool
	// reports, when not nil, are the reports the claim carries
	// (ports.ClaimCommand.Complete and Fail, the first completed of them
	// completions), applied in its first attempt's transaction.
	reports   *report
	completed int
}

// claimOf validates cmd: every field it names is checked, absent ones get
// their defaults.
func (s *TaskService) claimOf(cmd ports.ClaimCommand) (claim, error) {
	c := claim{workerID: cmd.WorkerID, queue: cmd.Queue, leaseSeconds: s.cfg.leaseSeconds(), maxBytes: s.cfg.maxResponseBytes(),
		push: cmd.Push}
	var v validation.Errors
	if cmd.WorkerID == "" {
		v.Add("worker_id", "is required")
	}
	if cmd.Queue != "" {
		task.CheckQueue(&v, "queue", cmd.Queue)
	}
	c.limit = optionalCount(&v, "limit", cmd.Limit, 1, MaxClaimLimit)
	if cmd.WaitMillis != nil {
		if ms := *cmd.WaitMillis; ms < 0 || ms > MaxClaimWait.Milliseconds() {
			v.Add("wait_ms", fmt.Sprintf("must be between 0 and %d", MaxClaimWait.Milliseconds()))
		} else {
			c.wait = time.Duration(ms) * time.Millisecond
		}
	}
	if cmd.LeaseSeconds != nil {
		c.leaseSeconds = *cmd.LeaseSeconds
		task.CheckLeaseSeconds(&v, "lease_seconds", c.leaseSeconds)
	}
	if cmd.RequestID != nil {
		c.requestID = *cmd.RequestID
		task.CheckRequestID(&v, "request_id", c.requestID)
	}
	return c, v.Err()
}

// claimWaiting subscribes before its second attempt, so a task submitted
// between an empty attempt and the wait still wakes it. Before every
// attempt after the first it checks that its principal's key still works
// (ports.CheckPrincipal): a key revoked or expired while the claim waited
// ends the wait with the authentication error and claims nothing. It then looks again
// only when woken (the notifier wakes as many waiters as tasks came, and
// again when delayed tasks fall due), when polling for a limited queue
// (ClaimPollInterval), or at the safety interval; those later attempts give
// no sign of life, so a waiting claim writes nothing. The reports a claim
// carries go with its first attempt; once they are saved the request
// answers with their outcomes whatever follows: an error of a later
// attempt ends the wait with no tasks (the worker's next request meets it).
func (s *TaskService) claimWaiting(ctx context.Context, cmd claim) (ports.ClaimResult, error) {
	deadline := time.NewTimer(cmd.wait)
	defer deadline.Stop()
	var (
		wait     ports.TaskWait
		woken    bool // this attempt follows a wake-up taken from wait
		reported []ports.TaskResult
		first    = cmd
	)
	empty := func() ports.ClaimResult {
		return withReported(ports.ClaimResult{Tasks: []*task.Task{}}, first, reported)
	}
	defer func() {
		if wait != nil {
			wait.Close()
		}
	}()
	for {
		if cmd.again {
			// The request was authenticated before its first attempt; a
			// key revoked or expired while it waited claims nothing.
			if err := ports.CheckPrincipal(ctx); err != nil {
				if woken {
					wait.Pass() // the task it was woken for waits for someone else
				}
				if first.reports != nil {
					return empty(), nil
				}
				return ports.ClaimResult{}, fmt.Errorf("claim tasks: %w", err)
			}
		}
		ans, err := s.claimOnce(ctx, cmd)
		if !cmd.again {
			reported = ans.reported
		}
		if err != nil || len(ans.result.Tasks) > 0 {
			if err != nil && woken {
				wait.Pass() // the task it was woken for waits for someone else
			}
			if err != nil && cmd.again && first.reports != nil {
				return empty(), nil
			}
			if err != nil {
				return ports.ClaimResult{}, err
			}
			return withReported(ans.result, first, reported), nil
		}
		cmd.again, cmd.reports = true, nil
		if wait == nil && s.notifier != nil && !ans.draining {
			wait = s.notifier.Wait(ports.WaitSpec{Queues: ans.queues, Limit: cmd.limit, Tags: ans.tags})
			woken = false
			continue // a task may have come between the attempt and the subscription
		}
		var (
			wake <-chan struct{}
			next time.Duration
		)
		switch {
		case ans.limited || s.notifier == nil:
			next = s.cfg.ClaimPollInterval
		default:
			// Every waiter of the instance at the same instants: their
			// attempts share transactions.
			next = s.cfg.ClaimSafetyInterval - time.Duration(time.Now().UnixNano()%int64(s.cfg.ClaimSafetyInterval))
		}
		if wait != nil {
			wake = wait.C()
		}
		poll := time.NewTimer(next)
		woken = false
		select {
		case _, open := <-wake:
			poll.Stop()
			if !open { // shutting down: answer at once
				return empty(), nil
			}
			woken = true
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return empty(), nil
		case <-ctx.Done():
			poll.Stop()
			return empty(), nil
		}
	}
}

// claimAnswer is a claim's answer from its batch, with what a waiting
// claim needs to know to wait: the queues it looked in (empty: any queue),
// its worker's tags, whether one of those queues is limited (notifications
// do not tell when a token refills or a slot frees), and whether its worker
// is draining.
type claimAnswer struct {
	result   ports.ClaimResult
	queues   []string
	tags     []string
	limited  bool
	draining bool
	// reported are the outcomes of the claim's reports (nil: it carried
	// none).
	reported []ports.TaskResult
}

// claimOnce claims in one transaction, which concurrent claims share
// (s.claims: one transaction, and one claim statement per set of queues and
// tags, for every claim that arrived while the previous batch ran).
func (s *TaskService) claimOnce(ctx context.Context, cmd claim) (claimAnswer, error) {
	out, err := s.claims.do(ctx, cmd)
	if err != nil {
		return claimAnswer{}, fmt.Errorf("claim tasks: %w", err)
	}
	return out, nil
}

// claimBatch serves a batch of claims in one transaction.
func (s *TaskService) claimBatch(ctx context.Context, batch []*pending[claim, claimAnswer]) error {
	return inOneTransaction(ctx, s.tx, batch, claimInTx)
}

// claimAllInTx answers each claim of the batch: under their workers'
// liveness locks (a worker the heartbeat reaper is declaring DEAD claims
// nothing), the tasks a repeated request id still holds, nothing for a
// draining worker, else new tasks, with one statement per set of queues and
// tags.
func claimAllInTx(ctx context.Context, st ports.Stores, batch []*pending[claim, claimAnswer]) error {
	ids := make([]string, 0, len(batch))
	seen := make(map[string]bool, len(batch))
	for _, p := range batch {
		p.res, p.err = claimAnswer{}, nil
		if !seen[p.req.workerID] {
			seen[p.req.workerID] = true
			ids = append(ids, p.req.workerID)
		}
	}
	// The claim counts as the worker's sign of life, given only for a
	// worker that a request may claim as (each request's principal must
	// own the worker and may use the queues the claim looks in; checked on
	// this read of the worker).
	denied := map[*pending[claim, claimAnswer]]error{}
	touch := signOfLifeFor(batch, func(p *pending[claim, claimAnswer]) string { return p.req.workerID },
		func(p *pending[claim, claimAnswer], w *worker.Worker) error {
			pr := ports.Principal(p.ctx)
			if err := pr.CheckActAs(w.ID(), w.Owner()); err != nil {
				return err
			}
			return pr.CheckQueues(claimQueues(p.req, w))
		}, func(p *pending[claim, claimAnswer]) bool { return !p.req.again }, denied)
	ws, err := st.Workers.TouchLiveEach(ctx, ids, touch)
	if err != nil {
		return err
	}
	workers := make(map[string]ports.WorkerResult, len(ws))
	for _, w := range ws {
		workers[w.ID] = w
	}
	var (
		open   []*pending[claim, claimAnswer] // still to be answered
		refs   []ports.ClaimRef
		repeat []*pending[claim, claimAnswer]
	)
	for _, p := range batch {
		w := workers[p.req.workerID]
		if err := denied[p]; err != nil {
			p.err = err
			continue
		}
		if w.Err != nil {
			p.err = w.Err
			continue
		}
		p.res.queues = claimQueues(p.req, w.Worker)
		p.res.tags = w.Worker.Tags()
		p.res.draining = w.Worker.Draining()
		p.res.result.Tasks = []*task.Task{}
		if p.req.requestID != "" {
			refs = append(refs, ports.ClaimRef{WorkerID: p.req.workerID, RequestID: p.req.requestID})
			repeat = append(repeat, p)
		}
		open = append(open, p)
	}
	if len(refs) > 0 {
		// A repeat of a claim whose answer was lost: the tasks it holds from
		// that claim, not new ones (they would be orphaned later, each
		// burning an attempt). Draining does not stop it: the tasks were
		// claimed before.
		held, err := st.Tasks.ClaimedUnderEach(ctx, refs)
		if err != nil {
			return err
		}
		for i, p := range repeat {
			p.res.result.Tasks = held[i]
		}
	}
	type group struct {
		params  ports.ClaimGroupParams
		members []*pending[claim, claimAnswer]
	}
	var (
		groups []*group
		byKey  = map[string]*group{}
	)
	for _, p := range open {
		w := workers[p.req.workerID].Worker
		if len(p.res.result.Tasks) > 0 || w.Draining() {
			continue
		}
		key := strings.Join(p.res.queues, "\x00") + "\x01" + strings.Join(w.Tags(), "\x00")
		if p.req.push {
			key = "\x02" + key
		}
		g := byKey[key]
		if g == nil {
			g = &group{params: ports.ClaimGroupParams{Queues: p.res.queues, WorkerTags: w.Tags(), Push: p.req.push}}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.params.Requests = append(g.params.Requests, ports.ClaimRequest{
			WorkerID: w.ID(), Limit: p.req.limit, LeaseSeconds: p.req.leaseSeconds, RequestID: p.req.requestID,
			MaxBytes: p.req.maxBytes, CorrelationID: ports.CorrelationID(p.ctx),
		})
		g.members = append(g.members, p)
	}
	for _, g := range groups {
		outs, err := st.Tasks.ClaimGroup(ctx, g.params)
		if err != nil {
			return err
		}
		for i, p := range g.members {
			p.res.result = ports.ClaimResult{Tasks: outs[i].Tasks, Truncated: outs[i].Truncated}
			p.res.limited = outs[i].Limited
		}
	}
	return nil
}

// claimQueues are the queues claim c of worker w looks in.
func claimQueues(c claim, w *worker.Worker) []string {
	if c.queue != "" {
		return []string{c.queue}
	}
	return w.Queues()
}

func signOfLife(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
	return w.SignOfLife(now)
}

// optionalCount is an optional count's value: def when n is absent, else
// *n, which must lie between 1 and most (v names field otherwise). An
// explicit 0 is out of range, never the default.
func optionalCount(v *validation.Errors, field string, n *int, def, most int) int {
	if n == nil {
		return def
	}
	if *n < 1 || *n > most {
		v.Add(field, fmt.Sprintf("must be between 1 and %d", most))
	}
	return *n
}
