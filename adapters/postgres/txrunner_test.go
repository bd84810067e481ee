package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

func TestTxRunnerCommitsStateWithOneOutboxMessageOfAllEvents(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	ctx := ports.WithCorrelationID(t.Context(), "corr-1")
	a, b := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	var txNow time.Time

	err := f.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		for _, id := range []uuid.UUID{a, b} {
			_, _, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
				txNow = now
				return task.Submit(task.SubmitParams{ID: id, Queue: "q"}, now)
			})
			if err != nil {
				return err
			}
		}
		st.Outbox.Record(event.Event{Version: event.Version, Type: event.TaskCleaned, TaskID: "extra", CorrelationID: "own"})
		return nil
	})
	require.NoError(t, err)

	var stored []uuid.UUID
	require.NoError(t, f.db.Select(&stored, `SELECT id FROM tasks ORDER BY seq`))
	require.Equal(t, []uuid.UUID{a, b}, stored)

	msgs := f.outbox()
	require.Len(t, msgs, 1, "one transaction, one outbox message")
	events := msgs[0].Events
	require.Equal(t, []event.Type{event.TaskSubmitted, event.TaskSubmitted, event.TaskCleaned}, eventTypes(events))
	require.Equal(t, a.String(), events[0].TaskID)
	require.Equal(t, b.String(), events[1].TaskID)
	require.True(t, events[0].OccurredAt.Equal(txNow), "events carry the database time")
	require.Equal(t, "corr-1", events[0].CorrelationID, "the request's correlation id is stamped on events")
	require.Equal(t, "corr-1", events[1].CorrelationID)
	require.Equal(t, "own", events[2].CorrelationID, "an event's own correlation id is kept")
	require.Equal(t, "corr-1", msgs[0].Metadata[envelope.MetadataCorrelationID])

	var txIDs int
	require.NoError(t, f.db.Get(&txIDs, `SELECT count(DISTINCT transaction_id) FROM watermill_taskmaster_events`))
	require.Equal(t, 1, txIDs)
}

func TestTxRunnerRollsBackStateAndEventsWhenFnFails(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	boom := errors.New("boom")

	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, created, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Submit(task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: "q"}, now)
		})
		require.NoError(t, err)
		require.True(t, created)
		st.Outbox.Record(event.Event{Version: event.Version, Type: event.TaskCleaned})
		return boom
	})
	require.ErrorIs(t, err, boom)

	var tasks int
	require.NoError(t, f.db.Get(&tasks, `SELECT count(*) FROM tasks`))
	require.Zero(t, tasks, "the task was rolled back")
	require.Empty(t, f.outbox(), "no event outlives its transaction")
}

func TestTxRunnerWritesNoOutboxMessageWithoutEvents(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	created := f.submit(task.SubmitParams{Queue: "q"})
	require.Len(t, f.outbox(), 1)

	f.get(created.ID()) // a read-only use case
	f.claim(ports.ClaimParams{Queues: []string{"empty"}})

	require.Len(t, f.outbox(), 1, "transactions without events append nothing")
}
