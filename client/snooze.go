package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Bounds of a snooze.
const (
	// MinSnooze is the shortest snooze the server accepts.
	MinSnooze = time.Second
	// MaxSnooze is the longest (30 days).
	MaxSnooze = 30 * 24 * time.Hour
)

// SnoozeParams put a held task back for later.
type SnoozeParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (required), as for
	// CompleteParams.
	LeaseID string
	// Delay is how long from now the task waits, MinSnooze to MaxSnooze;
	// it is sent in whole seconds, rounded up.
	Delay time.Duration
}

// Snooze puts a held task back to PENDING, claimable p.Delay from now,
// without spending an attempt: the claim's attempt is given back
// (Task.Attempts goes down by one) and Task.Snoozes counts it. Fenced like
// Complete: IsLeaseLost or IsInvalidTransition means the task is no longer
// this worker's.
func (c *Client) Snooze(ctx context.Context, taskID string, p SnoozeParams) (*Task, error) {
	body := struct {
		WorkerID     string `json:"worker_id"`
		LeaseID      string `json:"lease_id,omitempty"`
		DelaySeconds int64  `json:"delay_seconds"`
	}{p.WorkerID, p.LeaseID, snoozeSeconds(p.Delay)}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "snooze"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// snoozeSeconds is d in whole seconds, rounded up.
func snoozeSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// Snooze is what a Runner handler returns (as its error) to snooze its task
// for d: the runner puts the task back to PENDING, claimable d from now,
// without spending an attempt (see Client.Snooze). d is rounded up to whole
// seconds; out of MinSnooze..MaxSnooze the server refuses the snooze and
// the runner fails the task (retryable) instead.
//
//	return nil, client.Snooze(10 * time.Minute) // not ready yet: look again later
func Snooze(d time.Duration) error { return &snoozeError{delay: d} }

type snoozeError struct{ delay time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snooze for %s", e.delay) }

// SnoozeDelay reports whether err asks for a snooze (see Snooze), and for
// how long.
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *snoozeError
	if errors.As(err, &s) {
		return s.delay, true
	}
	return 0, false
}
