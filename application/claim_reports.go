package application

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// A claim may carry its worker's reports (ports.ClaimCommand.Complete and
// Fail): a worker that takes one task at a time then spends one request,
// and one share of one transaction, per task instead of two. The reports
// are one report request (the completions first, then the failures),
// applied exactly as the batch reports apply theirs, in the transaction of
// the claim's first attempt and before its claim statement: a task the
// report gives back (a retry due at once) may be claimed by it.

// claimReports is cmd's reports as one report request (nil when it
// carries none) and how many of its items are completions. Field names in
// what it refuses are the request's: complete[i].lease_id, fail[i].error.
func (s *TaskService) claimReports(ctx context.Context, cmd ports.ClaimCommand) (*report, int, error) {
	nc, nf := len(cmd.Complete), len(cmd.Fail)
	if nc == 0 && nf == 0 {
		return nil, 0, nil
	}
	var v validation.Errors
	if nc+nf > MaxBatch {
		v.Add("complete", fmt.Sprintf("and fail may hold at most %d items together", MaxBatch))
	}
	seen := make(map[uuid.UUID]bool, nc)
	for i, it := range cmd.Complete {
		if it.Enqueue != nil {
			v.Add(fmt.Sprintf("complete[%d].enqueue", i), "is not accepted on a claim: complete with POST /tasks/v1/complete")
		}
		seen[it.TaskID] = true
	}
	for i, it := range cmd.Fail {
		if seen[it.TaskID] {
			v.Add(fmt.Sprintf("fail[%d].id", i), "is completed by the same request")
		}
	}
	if err := v.Err(); err != nil {
		return nil, 0, err
	}
	var done, failed report
	if nc > 0 {
		r, err := completeReport(ctx, "complete", cmd.WorkerID, cmd.Complete)
		if err != nil {
			return nil, 0, err
		}
		done = r
	}
	if nf > 0 {
		r, err := s.failReport(ctx, "fail", cmd.WorkerID, cmd.Fail)
		if err != nil {
			return nil, 0, err
		}
		failed = r
	}
	switch {
	case nf == 0:
		return &done, nc, nil
	case nc == 0:
		return &failed, 0, nil
	}
	joined := joinReports(done, failed)
	return &joined, nc, nil
}

// joinReports is one report request of a's items followed by b's (same
// worker, neither with a then). Only a request of plain completions is
// served by TaskStore.CompleteEach, so the join's go through UpdateEach.
func joinReports(a, b report) report {
	n := len(a.ids)
	r := report{workerID: a.workerID, ids: append(slices.Clone(a.ids), b.ids...)}
	r.decide = func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		if i < n {
			return a.decide(i, t, now)
		}
		return b.decide(i-n, t, now)
	}
	if a.refuse != nil || b.refuse != nil {
		r.refuse = func(st ports.Stores) []error {
			return append(refusals(a, st), refusals(b, st)...)
		}
	}
	return r
}

// refusals is r.refuse's answer, or no refusal for each item without one.
func refusals(r report, st ports.Stores) []error {
	if r.refuse == nil {
		return make([]error, len(r.ids))
	}
	return r.refuse(st)
}

// claimFits is the claims combiner's fits: p may join batch unless its
// reports name a task that the reports of a claim in batch name too (one
// transaction changes a task once).
func claimFits(batch []*pending[claim, claimAnswer], p *pending[claim, claimAnswer]) bool {
	if p.req.reports == nil {
		return true
	}
	for _, q := range batch {
		if q.req.reports != nil && idsOverlap(q.req.reports.ids, p.req.reports.ids) {
			return false
		}
	}
	return true
}

// errClaimRefused fails a shared claim transaction in which a claim whose
// reports changed tasks failed on its own: the batch runs again one
// request at a time, and that request's reports roll back alone.
var errClaimRefused = errors.New("a claim of the batch that carried reports failed")

// claimInTx applies the reports the batch's claims carry (as reportInTx
// applies the batch reports, less the touch of their workers: without it
// no request is refused as a whole), then answers every claim
// (claimAllInTx). A claim that fails after its reports changed tasks fails
// the transaction: its request is all or nothing.
func claimInTx(ctx context.Context, st ports.Stores, batch []*pending[claim, claimAnswer]) error {
	var (
		subs []*pending[report, []ports.TaskResult]
		of   []*pending[claim, claimAnswer]
	)
	for _, p := range batch {
		if p.req.reports != nil {
			subs = append(subs, &pending[report, []ports.TaskResult]{ctx: p.ctx, req: *p.req.reports})
			of = append(of, p)
		}
	}
	// The claims touch their workers, and check that their requests may
	// act as them, after the reports: a refusal rolls the reports back.
	if len(subs) > 0 {
		if err := applyReports(ctx, st, subs, false); err != nil {
			return err
		}
	}
	if err := claimAllInTx(ctx, st, batch); err != nil {
		return err
	}
	for i, sp := range subs {
		p := of[i]
		p.res.reported = sp.res
		if p.err == nil {
			continue
		}
		for _, res := range sp.res {
			if res.Err == nil { // a report changed a task
				if len(batch) == 1 {
					return p.err // its reports roll back
				}
				return errClaimRefused
			}
		}
	}
	return nil
}
