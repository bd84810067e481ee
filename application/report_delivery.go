package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// ReportDelivery applies a push dispatcher's report of one delivery to the
// task it holds, fenced by its lease like any holder's report and in the
// same shared transactions: a completion with the endpoint's answer as the
// result, or a failure (retried after the backoff, or after the endpoint's
// Retry-After, or DEAD), the attempt recording the HTTP status.
func (s *TaskService) ReportDelivery(ctx context.Context, r ports.DeliveryReport) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, r.WorkerID)
	if err := v.Err(); err != nil {
		return nil, err
	}
	var fn ports.TaskUpdateFunc
	if r.Complete {
		fn = func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Complete(task.CompleteParams{WorkerID: r.WorkerID, LeaseID: r.LeaseID, Result: r.Result, HTTPStatus: r.HTTPStatus}, now)
			return []event.Event{e}, err
		}
	} else {
		fn = func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Fail(task.FailParams{
				WorkerID: r.WorkerID, LeaseID: r.LeaseID, Error: r.Error, Retryable: r.Retryable, Rand: s.rand,
				HTTPStatus: r.HTTPStatus, RetryAfter: r.RetryAfter,
			}, s.cfg.Backoff, now)
			return []event.Event{e}, err
		}
	}
	var check func(ports.Stores) error
	if r.Complete {
		check = func(st ports.Stores) error {
			var v validation.Errors
			checkJSON(&v, st, "result", r.Result)
			return v.Err()
		}
	}
	out, err := s.updateReported(ctx, r.TaskID, r.WorkerID, check, fn, nil)
	if err != nil {
		return nil, fmt.Errorf("report delivery: %w", err)
	}
	return out, nil
}
