package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
)

// ReplayParams describe a replay: the new task's id and the optional
// overrides of the original's settings (nil or empty: the original's).
type ReplayParams struct {
	ID uuid.UUID
	// Payload replaces the original's payload.
	Payload json.RawMessage
	// Priority, MaxAttempts, TimeoutSeconds and GroupKey replace the
	// original's.
	Priority       *int
	MaxAttempts    *int
	TimeoutSeconds *int
	GroupKey       *string
	// Tags, when not nil, replace the original's (an empty list: none).
	Tags []string
	// Metadata, when not nil, replaces the original's (an empty map: none).
	Metadata map[string]string
	// RunAt is when the replay may run (nil: now).
	RunAt *time.Time
	// Deadline is the replay's deadline (nil: none; the original's is not
	// copied, being likely past).
	Deadline *time.Time
	// Trace is the trace context of the replay's request (zero: the
	// original's).
	Trace Trace
}

// ReplayError: only a DONE or DEAD task can be replayed.
type ReplayError struct {
	// ID is the task asked to replay.
	ID uuid.UUID
	// Status is its status.
	Status Status
}

// Error implements error.
func (e *ReplayError) Error() string {
	return fmt.Sprintf("task %s is %s: only a DONE or DEAD task can be replayed", e.ID, e.Status)
}

// Replay creates, at now, a PENDING task from orig, a DONE or DEAD task:
// the same queue, payload, priority, max_attempts, tags, retry policy,
// group, unique key, time limit, metadata and trace (the overrides in p
// apply), linked to orig by ReplayOf. It is a new task in a run of its own,
// with no dependencies and no idempotency key (orig's names orig). The
// overrides are checked as a submission's fields are.
func Replay(orig *Task, p ReplayParams, now time.Time) (*Task, event.Event, error) {
	o := orig.s
	if o.Status != StatusDone && o.Status != StatusDead {
		return nil, event.Event{}, &ReplayError{ID: o.ID, Status: o.Status}
	}
	sp := SubmitParams{
		ID: p.ID, Queue: o.Queue, Payload: o.Payload, Priority: o.Priority, Tags: slices.Clone(o.Tags),
		RunAt: p.RunAt, Deadline: p.Deadline, Retry: retryParamsOf(o.Retry), Metadata: cloneMetadata(o.Metadata),
		Trace: o.Trace,
	}
	maxAttempts := o.MaxAttempts
	sp.MaxAttempts = &maxAttempts
	if o.UniqueKey != "" {
		k := o.UniqueKey
		sp.UniqueKey = &k
	}
	if o.GroupKey != "" {
		g := o.GroupKey
		sp.GroupKey = &g
	}
	if o.TimeoutSeconds > 0 {
		n := o.TimeoutSeconds
		sp.TimeoutSeconds = &n
	}
	if p.Payload != nil {
		sp.Payload = p.Payload
	}
	if p.Priority != nil {
		sp.Priority = *p.Priority
	}
	if p.MaxAttempts != nil {
		sp.MaxAttempts = p.MaxAttempts
	}
	if p.TimeoutSeconds != nil {
		sp.TimeoutSeconds = p.TimeoutSeconds
	}
	if p.GroupKey != nil {
		sp.GroupKey = p.GroupKey
	}
	if p.Tags != nil {
		sp.Tags = p.Tags
	}
	if p.Metadata != nil {
		sp.Metadata = p.Metadata
	}
	if p.Trace != (Trace{}) {
		sp.Trace = p.Trace
	}
	t, e, err := Submit(sp, now)
	if err != nil {
		return nil, event.Event{}, err
	}
	t.s.ReplayOf = o.ID
	e.ReplayOf = o.ID.String()
	return t, e, nil
}

// retryParamsOf is a stored retry policy as submission parameters (nil:
// the server's).
func retryParamsOf(p *backoff.Policy) *RetryParams {
	if p == nil {
		return nil
	}
	base, maxSeconds, jitter := p.Base.Seconds(), p.Cap.Seconds(), p.Jitter
	if jitter == "" {
		jitter = backoff.JitterNone
	}
	return &RetryParams{BaseSeconds: &base, MaxSeconds: &maxSeconds, Jitter: &jitter}
}
