package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Every committed transition appends exactly one outbox message with its
// events, in the same transaction; a rolled-back or refused transition
// appends nothing.
func TestCommittedTransitionsAppendOneMessageEachRolledBackNone(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ports.WithCorrelationID(ctxT(t), "corr-1")

	_, _, err := e.workers.Register(ctx, worker.RegisterParams{ID: "w1", Queues: []string{"q"}})
	require.NoError(t, err)
	var ids []uuid.UUID
	for range 3 {
		tk, created, err := e.tasks.Submit(ctx, task.SubmitParams{Queue: "q", MaxAttempts: ptr(3)})
		require.NoError(t, err)
		require.True(t, created)
		ids = append(ids, tk.ID())
	}
	// An idempotent resubmission changes nothing and appends nothing.
	_, _, err = e.tasks.Submit(ctx, task.SubmitParams{Queue: "q", IdempotencyKey: "k"})
	require.NoError(t, err)
	_, created, err := e.tasks.Submit(ctx, task.SubmitParams{Queue: "q", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.False(t, created)

	claimed, err := claimedTasks(e.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w1", Queue: "q", Limit: ptr(3)}))
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	byID := map[uuid.UUID]*task.Task{}
	for _, c := range claimed {
		byID[c.ID()] = c
	}
	lease := func(id uuid.UUID) *uuid.UUID { l := byID[id].Snapshot().LeaseID; return &l }
	_, err = e.tasks.Complete(ctx, ports.CompleteCommand{TaskID: ids[0], WorkerID: "w1", LeaseID: lease(ids[0])})
	require.NoError(t, err)
	_, err = e.tasks.Fail(ctx, ports.FailCommand{TaskID: ids[1], WorkerID: "w1", LeaseID: lease(ids[1]), Error: "boom", Retryable: true})
	require.NoError(t, err)

	// Refused transitions: completed twice, another worker, a stale lease.
	_, err = e.tasks.Complete(ctx, ports.CompleteCommand{TaskID: ids[0], WorkerID: "w1", LeaseID: lease(ids[0])})
	var transErr *task.TransitionError
	require.ErrorAs(t, err, &transErr)
	_, err = e.tasks.Complete(ctx, ports.CompleteCommand{TaskID: ids[2], WorkerID: "w2", LeaseID: lease(ids[2])})
	var leaseErr *task.LeaseError
	require.ErrorAs(t, err, &leaseErr)
	stale := uuid.New()
	_, err = e.tasks.Fail(ctx, ports.FailCommand{TaskID: ids[2], WorkerID: "w1", LeaseID: &stale, Retryable: true})
	require.ErrorAs(t, err, &leaseErr)

	// A transaction that changes state, records events and then fails rolls
	// all of it back.
	boom := errors.New("boom")
	err = e.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if _, err := st.Tasks.Update(ctx, ids[2], func(tk *task.Task, now time.Time) ([]event.Event, error) {
			ev, err := tk.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: tk.Snapshot().LeaseID}, now)
			return []event.Event{ev}, err
		}); err != nil {
			return err
		}
		if _, _, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Submit(task.SubmitParams{ID: uuid.New(), Queue: "rolled-back"}, now)
		}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	got, err := e.tasks.Get(ctx, ids[2])
	require.NoError(t, err)
	require.Equal(t, task.StatusRunning, got.Status())

	_, err = e.tasks.Cancel(ctx, ids[1]) // PENDING again after the retryable failure
	require.NoError(t, err)

	msgs := outboxMessages(t, e.db)
	want := [][]event.Type{
		{event.WorkerRegistered},
		{event.TaskSubmitted}, {event.TaskSubmitted}, {event.TaskSubmitted},
		{event.TaskSubmitted}, // the idempotency key's first submission
		{event.TaskClaimed, event.TaskClaimed, event.TaskClaimed},
		{event.TaskCompleted},
		{event.TaskFailed},
		{event.TaskDeadLettered, event.AuditTaskCancelled}, // an operator's action is audited in its transaction
	}
	got2 := make([][]event.Type, len(msgs))
	for i, m := range msgs {
		got2[i] = m.types()
		require.Equal(t, "corr-1", m.correlationID)
		for _, ev := range m.events {
			require.Equal(t, "corr-1", ev.CorrelationID)
			require.Equal(t, event.Version, ev.Version)
			require.False(t, ev.OccurredAt.IsZero())
		}
		if i > 0 {
			require.True(t, msgs[i-1].pos.Less(m.pos), "messages are in commit order")
		}
	}
	require.Equal(t, want, got2)
	// The refused and rolled-back transitions left no trace.
	require.NotContains(t, truthCounts(t, e.db), "rolled-back/PENDING")
	failed := msgs[7].events[0]
	require.Equal(t, "RUNNING", failed.From)
	require.Equal(t, "PENDING", failed.To)
	require.Equal(t, "failed", failed.Reason)
	require.NotNil(t, failed.ExecutionSeconds)
	claimedEv := msgs[5].events[0]
	require.NotNil(t, claimedEv.QueueWaitSeconds)
	completed := msgs[6].events[0]
	require.NotNil(t, completed.EndToEndSeconds)
}

func ptr[T any](v T) *T { return &v }

// claimedTasks is the tasks of a claim's result, for tests that check them.
func claimedTasks(r ports.ClaimResult, err error) ([]*task.Task, error) { return r.Tasks, err }
