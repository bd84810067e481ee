package client

import (
	"context"
	"net/http"
)

// ReleaseParams hand a held task back.
type ReleaseParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (required), as for
	// CompleteParams.
	LeaseID string
}

// Release hands a held task back to PENDING, claimable at once, without
// spending an attempt: the claim's attempt is given back (Task.Attempts goes
// down by one) and ends with outcome AttemptReleased. It is what a stopping
// worker does with a task it will not finish, so that a task on its last
// attempt is not dead-lettered by a drain. A task an operator asked to
// cancel ends DEAD cancelled instead. Fenced like Complete: IsLeaseLost or
// IsInvalidTransition means the task is no longer this worker's (after a
// lost answer, a retry that finds the task PENDING or claimed by another
// worker says lease-lost although the first try released it).
func (c *Client) Release(ctx context.Context, taskID string, p ReleaseParams) (*Task, error) {
	body := struct {
		WorkerID string `json:"worker_id"`
		LeaseID  string `json:"lease_id,omitempty"`
	}{p.WorkerID, p.LeaseID}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "release"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// ReleaseBatch hands up to MaxBatch held tasks back in one request and one
// transaction (a draining worker's whole hand), each fenced on its own like
// CompleteBatch. The outcomes, in request order, are OutcomeRequeued
// (PENDING, claimable now, the attempt given back), OutcomeDead (an
// operator had asked to cancel it) or OutcomeError with the item's Problem.
func (c *Client) ReleaseBatch(ctx context.Context, workerID string, items []LeaseRef) ([]ItemOutcome, error) {
	return c.reportBatch(ctx, "/tasks/v1/release", workerID, items, len(items))
}
