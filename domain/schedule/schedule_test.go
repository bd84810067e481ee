package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func ptr[T any](v T) *T { return &v }

// every is an "@every" spec.
type every time.Duration

func (e every) Next(t time.Time) time.Time { return t.Add(time.Duration(e)) }
func (e every) Period() time.Duration      { return time.Duration(e) }

// hourly ticks at minute m of every hour, in its zone.
type hourly struct {
	m   int
	loc *time.Location
}

func (h hourly) Next(t time.Time) time.Time {
	l := t.In(h.loc)
	n := time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), h.m, 0, 0, h.loc)
	for !n.After(t) {
		n = n.Add(time.Hour)
	}
	return n
}
func (hourly) Period() time.Duration { return 0 }

// never ticks.
type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }
func (never) Period() time.Duration    { return 0 }

// parse understands "@every <d>", "hourly:<m>", "never" and refuses the rest.
func parse(expr string, loc *time.Location) (schedule.Spec, error) {
	switch {
	case strings.HasPrefix(expr, "@every "):
		d, err := time.ParseDuration(strings.TrimPrefix(expr, "@every "))
		if err != nil {
			return nil, err
		}
		return every(d), nil
	case expr == "hourly:15":
		return hourly{15, loc}, nil
	case expr == "never":
		return never{}, nil
	}
	return nil, errors.New("bad expression")
}

func params() schedule.CreateParams {
	return schedule.CreateParams{Name: "nightly", Cron: "hourly:15", Task: task.SubmitParams{Queue: "reports", Payload: json.RawMessage(`{"a":1}`)}}
}

func create(t *testing.T, p schedule.CreateParams, now time.Time) *schedule.Schedule {
	t.Helper()
	s, err := schedule.Create(p, parse, now)
	require.NoError(t, err)
	return s
}

func fieldsOf(t *testing.T, err error) []string {
	t.Helper()
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	var out []string
	for _, f := range verr.Fields {
		out = append(out, f.Field)
	}
	return out
}

func TestCreate(t *testing.T) {
	t.Parallel()
	s := create(t, params(), at(20*time.Minute))
	v := s.Snapshot()
	require.Equal(t, "UTC", v.Timezone, "the default zone")
	require.Equal(t, schedule.OverlapSkip, v.Overlap, "the default overlap")
	require.Equal(t, ptr(at(75*time.Minute)), v.NextRunAt, "the first tick after now")
	require.Equal(t, 3, *v.Task.MaxAttempts, "the task's defaults are filled in")
	require.Equal(t, uuid.Nil, v.LastTaskID)

	paused := params()
	paused.Paused = true
	require.Nil(t, create(t, paused, base).Snapshot().NextRunAt, "a paused schedule has no next tick")

	periodic := params()
	periodic.Cron = "@every 10s"
	require.Equal(t, ptr(at(10*time.Second)), create(t, periodic, at(300*time.Millisecond)).Snapshot().NextRunAt,
		"@every ticks on whole seconds")

	zoned := params()
	zoned.Timezone = "Asia/Kolkata" // UTC+05:30: minute 15 there is minute 45 in UTC
	require.Equal(t, ptr(at(45*time.Minute)), create(t, zoned, base).Snapshot().NextRunAt)
}

func TestCreateRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(p *schedule.CreateParams)
		want   []string
	}{
		{"bad name", func(p *schedule.CreateParams) { p.Name = "a/b" }, []string{"name"}},
		{"empty name", func(p *schedule.CreateParams) { p.Name = "" }, []string{"name"}},
		{"no cron", func(p *schedule.CreateParams) { p.Cron = "" }, []string{"cron"}},
		{"bad cron", func(p *schedule.CreateParams) { p.Cron = "sometimes" }, []string{"cron"}},
		{"never fires", func(p *schedule.CreateParams) { p.Cron = "never" }, []string{"cron"}},
		{"bad zone", func(p *schedule.CreateParams) { p.Timezone = "Mars/Olympus" }, []string{"timezone"}},
		{"local zone", func(p *schedule.CreateParams) { p.Timezone = "Local" }, []string{"timezone"}},
		{"bad overlap", func(p *schedule.CreateParams) { p.Overlap = "queue" }, []string{"overlap"}},
		{"task fields", func(p *schedule.CreateParams) {
			p.Task = task.SubmitParams{Queue: "", RunAt: ptr(base), Deadline: ptr(at(time.Hour)), IdempotencyKey: "k", MaxAttempts: ptr(0)}
		}, []string{"task.run_at", "task.deadline", "task.idempotency_key", "task.queue", "task.max_attempts"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := params()
			c.change(&p)
			_, err := schedule.Create(p, parse, base)
			require.Equal(t, c.want, fieldsOf(t, err))
		})
	}
}

func TestDueTickCollapsesMissedTicks(t *testing.T) {
	t.Parallel()
	s := create(t, params(), base) // next: 12:15
	_, err := s.DueTick(parse, at(14*time.Minute))
	require.ErrorIs(t, err, schedule.ErrNotDue)

	tick, err := s.DueTick(parse, at(15*time.Minute))
	require.NoError(t, err)
	require.Equal(t, at(15*time.Minute), tick, "a tick is due at its time")

	// Down for two days: of the 48 ticks missed, only the latest runs.
	now := at(48*time.Hour + 40*time.Minute)
	tick, err = s.DueTick(parse, now)
	require.NoError(t, err)
	require.Equal(t, at(48*time.Hour+15*time.Minute), tick)
	require.NoError(t, s.Ran(tick, uuid.New(), parse, now))
	require.Equal(t, ptr(at(49*time.Hour+15*time.Minute)), s.Snapshot().NextRunAt, "the next tick comes after now")
	require.Equal(t, &tick, s.Snapshot().LastTickAt)

	p := params()
	p.Cron = "@every 7s"
	periodic := create(t, p, base) // ticks at base+7s, +14s, ...
	tick, err = periodic.DueTick(parse, at(time.Hour+3*time.Second))
	require.NoError(t, err)
	require.Equal(t, at(3598*time.Second), tick, "3603 s is 514 periods of 7 s and 5 s")
	require.NoError(t, periodic.Ran(tick, uuid.New(), parse, at(time.Hour+3*time.Second)))
	require.Equal(t, ptr(at(3605*time.Second)), periodic.Snapshot().NextRunAt)
}

// A tick's task is the schedule's, marked as the tick's (in UTC), with no
// idempotency key: only the scheduler marks a task, so nothing a producer
// submits is taken for it.
func TestTickTaskIsMarkedWithItsTick(t *testing.T) {
	t.Parallel()
	s := create(t, params(), base)
	tick := time.Date(2025, 3, 1, 23, 15, 0, 5e8, time.FixedZone("x", 5*3600+1800))
	id := uuid.New()
	tk, e, err := s.TickTask(tick, id, at(time.Hour))
	require.NoError(t, err)
	v := tk.Snapshot()
	require.Equal(t, id, v.ID)
	require.Equal(t, "reports", v.Queue)
	require.Empty(t, v.IdempotencyKey)
	require.Equal(t, "nightly", v.ScheduleName)
	require.Equal(t, time.Date(2025, 3, 1, 17, 45, 0, 5e8, time.UTC), *v.ScheduleTick)
	require.Equal(t, time.UTC, v.ScheduleTick.Location())
	require.True(t, tk.IsTick("nightly", tick))
	require.False(t, tk.IsTick("nightly", tick.Add(time.Second)))
	require.False(t, tk.IsTick("other", tick))
	require.Equal(t, event.TaskSubmitted, e.Type)
	v.Tags = append(v.Tags, "changed")
	require.Empty(t, s.Snapshot().Task.Tags, "the task is a copy")

	// A submission is never a tick's, whatever its key says.
	sub, _, err := task.Submit(task.SubmitParams{Queue: "reports", IdempotencyKey: "schedule:nightly:2025-03-01T17:45:00.5Z"}, base)
	require.NoError(t, err)
	require.False(t, sub.IsTick("nightly", tick))
	_, _, err = task.SubmitTick(task.SubmitParams{Queue: "reports", IdempotencyKey: "k"}, "nightly", tick, base)
	require.Error(t, err, "a tick's task has no idempotency key")
}

func TestOverlapAndSkip(t *testing.T) {
	t.Parallel()
	s := create(t, params(), base)
	require.False(t, s.Overlaps(task.StatusPending), "no previous task yet")
	tick := at(15 * time.Minute)
	require.NoError(t, s.Ran(tick, uuid.New(), parse, tick))
	for _, st := range []task.Status{task.StatusPending, task.StatusRunning} {
		require.True(t, s.Overlaps(st), st)
	}
	for _, st := range []task.Status{task.StatusDone, task.StatusDead, ""} {
		require.False(t, s.Overlaps(st), st)
	}

	next := at(75 * time.Minute)
	ev, err := s.Skip(next, schedule.SkipOverlap, parse, next.Add(time.Second))
	require.NoError(t, err)
	require.Equal(t, event.Event{Version: event.Version, Type: event.ScheduleTickSkipped, Schedule: "nightly", Queue: "reports",
		Reason: "overlap", OccurredAt: next.Add(time.Second)}, ev)
	v := s.Snapshot()
	require.EqualValues(t, 1, v.SkippedTicks)
	require.Equal(t, &next, v.LastTickAt)
	require.Equal(t, ptr(at(135*time.Minute)), v.NextRunAt)

	_, err = s.Skip(next, schedule.SkipOverlap, parse, next.Add(2*time.Second))
	require.ErrorIs(t, err, schedule.ErrNotDue, "a tick runs once")

	allow := params()
	allow.Overlap = schedule.OverlapAllow
	a := create(t, allow, base)
	require.NoError(t, a.Ran(tick, uuid.New(), parse, tick))
	require.False(t, a.Overlaps(task.StatusRunning))
}

func TestRanRefusesATickThatIsNotDue(t *testing.T) {
	t.Parallel()
	s := create(t, params(), base)
	require.ErrorIs(t, s.Ran(at(15*time.Minute), uuid.New(), parse, at(10*time.Minute)), schedule.ErrNotDue)
	require.ErrorIs(t, s.Ran(at(14*time.Minute), uuid.New(), parse, at(16*time.Minute)), schedule.ErrNotDue)
	require.Equal(t, uuid.Nil, s.Snapshot().LastTaskID)
}

func TestPatch(t *testing.T) {
	t.Parallel()
	s := create(t, params(), base)

	c, err := s.Patch(schedule.PatchParams{Paused: ptr(true)}, parse, at(time.Minute))
	require.NoError(t, err)
	require.Equal(t, schedule.Change{Paused: true}, c)
	require.Nil(t, s.Snapshot().NextRunAt)
	_, err = s.DueTick(parse, at(24*time.Hour))
	require.ErrorIs(t, err, schedule.ErrNotDue, "a paused schedule ticks no more")

	c, err = s.Patch(schedule.PatchParams{Paused: ptr(false)}, parse, at(3*time.Hour))
	require.NoError(t, err)
	require.Equal(t, schedule.Change{Resumed: true}, c)
	require.Equal(t, ptr(at(3*time.Hour+15*time.Minute)), s.Snapshot().NextRunAt, "ticks missed while paused are not run")

	c, err = s.Patch(schedule.PatchParams{Cron: ptr("@every 30s"), Overlap: ptr(schedule.OverlapAllow)}, parse, at(4*time.Hour))
	require.NoError(t, err)
	require.Equal(t, schedule.Change{Updated: true}, c)
	require.Equal(t, ptr(at(4*time.Hour+30*time.Second)), s.Snapshot().NextRunAt)
	require.Equal(t, at(4*time.Hour), s.Snapshot().UpdatedAt)

	c, err = s.Patch(schedule.PatchParams{Cron: ptr("@every 30s"), Paused: ptr(false)}, parse, at(5*time.Hour))
	require.NoError(t, err)
	require.Equal(t, schedule.Change{}, c, "the same values change nothing")
	require.Equal(t, at(4*time.Hour), s.Snapshot().UpdatedAt)

	before := s.Snapshot()
	_, err = s.Patch(schedule.PatchParams{Cron: ptr("sometimes"), Timezone: ptr("Nowhere/Land"),
		Task: &task.SubmitParams{Queue: "bad queue"}}, parse, at(6*time.Hour))
	require.Equal(t, []string{"task.queue", "timezone", "cron"}, fieldsOf(t, err))
	require.Equal(t, before, s.Snapshot(), "a refused patch changes nothing")
}
