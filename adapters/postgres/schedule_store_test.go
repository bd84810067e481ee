package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/cron"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

func (f *storeFixture) createSchedule(p schedule.CreateParams) (*schedule.Schedule, error) {
	var out *schedule.Schedule
	err := f.tx.Run(f.t.Context(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Schedules.Create(ctx, func(now time.Time) (*schedule.Schedule, []event.Event, error) {
			sc, err := schedule.Create(p, cron.Parse, now)
			return sc, nil, err
		})
		return err
	})
	return out, err
}

func TestScheduleStoreRoundTrip(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	jitter := backoff.JitterFull
	p := schedule.CreateParams{Name: "nightly", Cron: "0 3 * * *", Timezone: "Europe/Paris", Overlap: schedule.OverlapAllow,
		Task: task.SubmitParams{Queue: "reports", Payload: json.RawMessage(`{"full":true}`), Priority: 7, Tags: []string{"big"},
			UniqueKey: ptr("nightly-report"), Retry: &task.RetryParams{BaseSeconds: ptr(2.5), Jitter: &jitter}}}
	created, err := f.createSchedule(p)
	require.NoError(t, err)
	_, err = f.createSchedule(p)
	require.ErrorIs(t, err, schedule.ErrExists)

	var got *schedule.Schedule
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		got, err = st.Schedules.Get(ctx, "nightly")
		return err
	})
	want := created.Snapshot()
	have := got.Snapshot()
	require.WithinDuration(t, *want.NextRunAt, *have.NextRunAt, 0)
	want.NextRunAt, have.NextRunAt = nil, nil
	want.CreatedAt, want.UpdatedAt = want.CreatedAt.UTC(), want.UpdatedAt.UTC()
	have.CreatedAt, have.UpdatedAt = have.CreatedAt.UTC(), have.UpdatedAt.UTC()
	require.Equal(t, want, have)

	err = f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Schedules.Get(ctx, "none")
		return err
	})
	require.ErrorIs(t, err, schedule.ErrNotFound)
}

func TestScheduleStoreListIsRestrictedToVisibleQueues(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, c := range []struct{ name, queue string }{{"b", "emails-eu"}, {"a", "reports"}, {"c", "emails-us"}} {
		_, err := f.createSchedule(schedule.CreateParams{Name: c.name, Cron: "@every 1m", Task: task.SubmitParams{Queue: c.queue}})
		require.NoError(t, err)
	}
	names := func(visible []string) []string {
		var out []string
		f.run(func(ctx context.Context, st ports.Stores) error {
			all, err := st.Schedules.List(ctx, visible)
			for _, s := range all {
				out = append(out, s.Name())
			}
			return err
		})
		return out
	}
	require.Equal(t, []string{"a", "b", "c"}, names(nil))
	require.Equal(t, []string{"b", "c"}, names([]string{"emails-*"}))
	require.Equal(t, []string{"a"}, names([]string{"reports"}))
	require.Empty(t, names([]string{}))
}

// UpdateDue hands over only due schedules, each with the status of its last
// task, and saves what the tick decided.
func TestScheduleStoreUpdateDue(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, name := range []string{"due", "later", "paused"} {
		_, err := f.createSchedule(schedule.CreateParams{Name: name, Cron: "@every 1h", Paused: name == "paused", Task: task.SubmitParams{Queue: "q"}})
		require.NoError(t, err)
	}
	last := f.submit(task.SubmitParams{Queue: "q"})
	f.exec(`UPDATE schedules SET next_run_at = now() - interval '10 minutes', last_task_id = $1 WHERE name = 'due'`, last.ID())

	var seen []string
	var statuses []task.Status
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Schedules.UpdateDue(ctx, 10, func(sc *schedule.Schedule, status task.Status, now time.Time) ([]event.Event, error) {
			seen = append(seen, sc.Name())
			statuses = append(statuses, status)
			tick, err := sc.DueTick(cron.Parse, now)
			if err != nil {
				return nil, err
			}
			e, err := sc.Skip(tick, schedule.SkipOverlap, cron.Parse, now)
			return []event.Event{e}, err
		})
		return err
	})
	require.Equal(t, []string{"due"}, seen)
	require.Equal(t, []task.Status{task.StatusPending}, statuses)
	var row struct {
		Skipped int64     `db:"skipped_ticks"`
		Next    time.Time `db:"next_run_at"`
		Last    uuid.UUID `db:"last_task_id"`
	}
	require.NoError(t, f.db.Get(&row, `SELECT skipped_ticks, next_run_at, last_task_id FROM schedules WHERE name = 'due'`))
	require.EqualValues(t, 1, row.Skipped)
	require.True(t, row.Next.After(time.Now().Add(40*time.Minute)), "the next tick is the first after the one skipped")
	require.Equal(t, last.ID(), row.Last)
	msgs := f.outbox()
	require.Equal(t, []event.Type{event.ScheduleTickSkipped}, eventTypes(msgs[len(msgs)-1].Events))
}

func TestScheduleStoreDelete(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	_, err := f.createSchedule(schedule.CreateParams{Name: "gone", Cron: "@every 1m", Task: task.SubmitParams{Queue: "q"}})
	require.NoError(t, err)
	f.run(func(ctx context.Context, st ports.Stores) error {
		sc, err := st.Schedules.Delete(ctx, "gone", func(*schedule.Schedule, time.Time) ([]event.Event, error) { return nil, nil })
		require.Equal(t, "gone", sc.Name())
		return err
	})
	err = f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Schedules.Delete(ctx, "gone", func(*schedule.Schedule, time.Time) ([]event.Event, error) { return nil, nil })
		return err
	})
	require.ErrorIs(t, err, schedule.ErrNotFound)
}
