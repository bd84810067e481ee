package task_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
)

// A push delivery's report puts the endpoint's status on the attempt it
// ends; a Retry-After replaces the backoff's delay.
func TestDeliveryReportsRecordTheHTTPStatus(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	_, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID, Result: json.RawMessage(`{"ok":1}`), HTTPStatus: 201}, at(8*time.Second))
	require.NoError(t, err)
	a, ok := tk.EndedAttempt()
	require.True(t, ok)
	require.Equal(t, 201, a.HTTPStatus)
	require.Equal(t, task.OutcomeCompleted, a.Outcome)

	wait := 90 * time.Second
	tk = task.Restore(running(1))
	_, err = tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: "HTTP 429", Retryable: true, HTTPStatus: 429, RetryAfter: &wait}, policy, at(8*time.Second))
	require.NoError(t, err)
	v := tk.Snapshot()
	require.Equal(t, task.StatusPending, v.Status)
	require.Equal(t, at(98*time.Second), v.RunAt, "retried after the endpoint's Retry-After, not the backoff's 2 s")
	a, _ = tk.EndedAttempt()
	require.Equal(t, 429, a.HTTPStatus)
	require.Equal(t, "HTTP 429", a.Error)

	tk = task.Restore(running(1))
	_, err = tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: "timeout", Retryable: true}, policy, at(8*time.Second))
	require.NoError(t, err)
	require.Equal(t, at(10*time.Second), tk.Snapshot().RunAt, "the backoff without Retry-After")
	a, _ = tk.EndedAttempt()
	require.Zero(t, a.HTTPStatus, "no response, no status")

	tk = task.Restore(running(3))
	_, err = tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Retryable: true, HTTPStatus: 503, RetryAfter: &wait}, policy, at(8*time.Second))
	require.NoError(t, err)
	require.Equal(t, task.DeadExhausted, tk.Snapshot().DeadReason, "Retry-After does not add attempts")
}

// A push dispatcher delivers a task whatever its tags; the rest of the
// claim rule holds.
func TestDeliverableIgnoresTags(t *testing.T) {
	t.Parallel()
	tk := task.Restore(pending()) // tagged eu
	require.False(t, tk.Claimable(nil, at(time.Second)))
	require.True(t, tk.Deliverable(at(time.Second)))
	later := pending()
	later.RunAt = at(time.Minute)
	require.False(t, task.Restore(later).Deliverable(at(time.Second)))
}
