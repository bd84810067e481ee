package worker_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// base is the database time every test starts from.
var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// cfg is the liveness config of the tests: STALE after 30 s, DEAD after 120 s.
var cfg = worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}

const workerID = "host-1:4242"

func at(d time.Duration) time.Time { return base.Add(d) }

// snapshotIn is a worker registered at base whose last heartbeat was at base.
func snapshotIn(status worker.Status) worker.Snapshot {
	return worker.Snapshot{
		ID:              workerID,
		Queues:          []string{"emails", "reports"},
		Tags:            []string{"eu"},
		Status:          status,
		RegisteredAt:    base,
		LastHeartbeatAt: base,
	}
}

func workerEvent(typ event.Type, from, to worker.Status, queues []string, occurred time.Time) event.Event {
	return event.Event{
		Version:    event.Version,
		Type:       typ,
		WorkerID:   workerID,
		Queues:     queues,
		From:       string(from),
		To:         string(to),
		OccurredAt: occurred,
	}
}

func fields(err error) []string {
	var verr *validation.Error
	if !errors.As(err, &verr) {
		return nil
	}
	out := make([]string, len(verr.Fields))
	for i, f := range verr.Fields {
		out[i] = f.Field
	}
	return out
}

func list(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return out
}

func TestDefaultLivenessConfig(t *testing.T) {
	t.Parallel()
	c := worker.DefaultLivenessConfig()
	require.Equal(t, 30*time.Second, c.StaleAfter)
	require.Equal(t, 120*time.Second, c.DeadAfter)
	require.NoError(t, c.Validate())
}

func TestLivenessThresholds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		silence time.Duration
		want    worker.Status
	}{
		{"heartbeat in the future (clock skew)", -time.Second, worker.StatusActive},
		{"no silence", 0, worker.StatusActive},
		{"just below stale", 30*time.Second - time.Nanosecond, worker.StatusActive},
		{"exactly at stale", 30 * time.Second, worker.StatusStale},
		{"between stale and dead", time.Minute, worker.StatusStale},
		{"just below dead", 120*time.Second - time.Nanosecond, worker.StatusStale},
		{"exactly at dead", 120 * time.Second, worker.StatusDead},
		{"beyond dead", 24 * time.Hour, worker.StatusDead},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, cfg.Liveness(base, base.Add(c.silence)))
		})
	}
}

func TestLivenessConfigValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		cfg     worker.LivenessConfig
		wantErr string
	}{
		{"default", worker.DefaultLivenessConfig(), ""},
		{"smallest valid", worker.LivenessConfig{StaleAfter: time.Nanosecond, DeadAfter: 2 * time.Nanosecond}, ""},
		{"zero value", worker.LivenessConfig{}, "stale"},
		{"stale zero", worker.LivenessConfig{DeadAfter: time.Minute}, "stale"},
		{"stale negative", worker.LivenessConfig{StaleAfter: -time.Second, DeadAfter: time.Minute}, "stale"},
		{"dead equal to stale", worker.LivenessConfig{StaleAfter: time.Minute, DeadAfter: time.Minute}, "dead"},
		{"dead below stale", worker.LivenessConfig{StaleAfter: time.Minute, DeadAfter: time.Second}, "dead"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.cfg.Validate()
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.wantErr)
		})
	}
}

func TestHeartbeatInterval(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stale time.Duration
		want  time.Duration
	}{
		{30 * time.Second, 10 * time.Second},
		{3 * time.Second, time.Second},
		{time.Second, 333333333 * time.Nanosecond},
	}
	for _, c := range cases {
		t.Run(c.stale.String(), func(t *testing.T) {
			t.Parallel()
			got := worker.LivenessConfig{StaleAfter: c.stale, DeadAfter: 4 * c.stale}.HeartbeatInterval()
			require.Equal(t, c.want, got)
			// Two lost beats do not make a worker STALE.
			require.Less(t, 2*got, c.stale)
		})
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		params     worker.RegisterParams
		wantQueues []string
		wantTags   []string
	}{
		{"queues and tags de-duplicated in order",
			worker.RegisterParams{ID: workerID, Queues: []string{"b", "a", "b"}, Tags: []string{"gpu", "gpu", "eu"}},
			[]string{"b", "a"}, []string{"gpu", "eu"}},
		{"no queues and no tags",
			worker.RegisterParams{ID: workerID},
			[]string{}, []string{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w, ev, err := worker.Register(c.params, base)
			require.NoError(t, err)
			require.Equal(t, worker.Snapshot{
				ID: workerID, Queues: c.wantQueues, Tags: c.wantTags, Status: worker.StatusActive,
				RegisteredAt: base, LastHeartbeatAt: base,
			}, w.Snapshot())
			require.Equal(t, workerID, w.ID())
			require.Equal(t, worker.StatusActive, w.Status())
			require.Equal(t, c.wantQueues, w.Queues())
			require.Equal(t, c.wantTags, w.Tags())
			require.Equal(t, workerEvent(event.WorkerRegistered, "", worker.StatusActive, c.wantQueues, base), ev)
		})
	}
}

func TestValidateRegister(t *testing.T) {
	t.Parallel()
	valid := func(f func(p *worker.RegisterParams)) worker.RegisterParams {
		p := worker.RegisterParams{ID: workerID, Queues: []string{"emails"}, Tags: []string{"eu"}}
		f(&p)
		return p
	}
	cases := []struct {
		name       string
		params     worker.RegisterParams
		wantFields []string // nil: valid
		skip       string
	}{
		{"valid", valid(func(p *worker.RegisterParams) {}), nil, ""},
		{"every allowed id character", valid(func(p *worker.RegisterParams) { p.ID = "AZaz09._:-" }), nil, ""},
		{"id of 128 characters", valid(func(p *worker.RegisterParams) { p.ID = strings.Repeat("w", 128) }), nil, ""},
		{"id of 1 character", valid(func(p *worker.RegisterParams) { p.ID = "w" }), nil, ""},
		{"empty id", valid(func(p *worker.RegisterParams) { p.ID = "" }), []string{"id"}, ""},
		{"id too long", valid(func(p *worker.RegisterParams) { p.ID = strings.Repeat("w", 129) }), []string{"id"}, ""},
		{"id with a space", valid(func(p *worker.RegisterParams) { p.ID = "host 1" }), []string{"id"}, ""},
		{"id with a slash", valid(func(p *worker.RegisterParams) { p.ID = "host/1" }), []string{"id"}, ""},
		{"id with a non-ASCII letter", valid(func(p *worker.RegisterParams) { p.ID = "wörker" }), []string{"id"}, ""},
		{"id with a trailing newline", valid(func(p *worker.RegisterParams) { p.ID = "w1\n" }), []string{"id"}, ""},
		{"64 queues", valid(func(p *worker.RegisterParams) { p.Queues = list("q", 64) }), nil, ""},
		{"65 queues", valid(func(p *worker.RegisterParams) { p.Queues = list("q", 65) }), []string{"queues"}, ""},
		{"empty queue name", valid(func(p *worker.RegisterParams) { p.Queues = []string{"a", ""} }), []string{"queues[1]"}, ""},
		{"queue name of 128 bytes", valid(func(p *worker.RegisterParams) { p.Queues = []string{strings.Repeat("q", 128)} }), nil, ""},
		{"queue name too long", valid(func(p *worker.RegisterParams) { p.Queues = []string{strings.Repeat("q", 129)} }), []string{"queues[0]"}, ""},
		{"queue name of every character a task may use", valid(func(p *worker.RegisterParams) { p.Queues = []string{"AZaz09._:-"} }), nil, ""},
		{"queue name with a non-ASCII letter", valid(func(p *worker.RegisterParams) { p.Queues = []string{strings.Repeat("é", task.MaxQueueLength)} }), []string{"queues[0]"}, ""},
		{"queue name with a slash", valid(func(p *worker.RegisterParams) { p.Queues = []string{"ok", "a/b"} }), []string{"queues[1]"}, ""},
		{"queue name with a space", valid(func(p *worker.RegisterParams) { p.Queues = []string{"a b"} }), []string{"queues[0]"}, ""},
		{"64 tags", valid(func(p *worker.RegisterParams) { p.Tags = list("t", 64) }), nil, ""},
		{"65 tags", valid(func(p *worker.RegisterParams) { p.Tags = list("t", 65) }), []string{"tags"}, ""},
		{"empty tag", valid(func(p *worker.RegisterParams) { p.Tags = []string{""} }), []string{"tags[0]"}, ""},
		{"tag too long", valid(func(p *worker.RegisterParams) { p.Tags = []string{"a", "b", strings.Repeat("t", 129)} }), []string{"tags[2]"}, ""},
		{"everything wrong", worker.RegisterParams{ID: "", Queues: []string{""}, Tags: []string{"ok", ""}},
			[]string{"id", "queues[0]", "tags[1]"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.skip != "" {
				t.Skip(c.skip)
			}
			p := c.params
			err := worker.ValidateRegister(&p)
			if c.wantFields == nil {
				require.NoError(t, err)
				return
			}
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.ElementsMatch(t, c.wantFields, fields(err))

			// Register refuses the same input and creates nothing.
			w, ev, err := worker.Register(c.params, base)
			require.Nil(t, w)
			require.Equal(t, event.Event{}, ev)
			require.ElementsMatch(t, c.wantFields, fields(err))
		})
	}
}

func TestReregister(t *testing.T) {
	t.Parallel()
	for _, from := range []worker.Status{worker.StatusActive, worker.StatusStale, worker.StatusDead} {
		t.Run(string(from), func(t *testing.T) {
			t.Parallel()
			draining := snapshotIn(from)
			draining.Draining = true
			w := worker.Restore(draining)
			now := at(10 * time.Minute)
			// The id in the params is ignored: a worker keeps its id; a
			// drain request is cleared.
			ev, err := w.Reregister(worker.RegisterParams{ID: "someone-else", Queues: []string{"x", "x", "y"}, Tags: []string{"gpu"}}, now)
			require.NoError(t, err)
			require.Equal(t, worker.Snapshot{
				ID: workerID, Queues: []string{"x", "y"}, Tags: []string{"gpu"}, Status: worker.StatusActive,
				RegisteredAt: base, LastHeartbeatAt: now,
			}, w.Snapshot())
			require.Equal(t, workerEvent(event.WorkerRegistered, from, worker.StatusActive, []string{"x", "y"}, now), ev)
			require.NoError(t, w.CanClaim())
		})
	}
}

func TestReregisterInvalid(t *testing.T) {
	t.Parallel()
	for _, from := range []worker.Status{worker.StatusActive, worker.StatusStale, worker.StatusDead} {
		t.Run(string(from), func(t *testing.T) {
			t.Parallel()
			w := worker.Restore(snapshotIn(from))
			before := w.Snapshot()
			ev, err := w.Reregister(worker.RegisterParams{Queues: []string{""}}, at(time.Minute))
			require.Equal(t, []string{"queues[0]"}, fields(err))
			require.Equal(t, event.Event{}, ev)
			require.Equal(t, before, w.Snapshot())
		})
	}
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	now := at(time.Minute)
	cases := []struct {
		from       worker.Status
		wantErr    error
		wantStatus worker.Status
		wantBeatAt time.Time
		wantEvents []event.Event
	}{
		{worker.StatusActive, nil, worker.StatusActive, now, nil},
		{worker.StatusStale, nil, worker.StatusActive, now,
			[]event.Event{workerEvent(event.WorkerRevived, worker.StatusStale, worker.StatusActive, []string{"emails", "reports"}, now)}},
		{worker.StatusDead, worker.ErrDead, worker.StatusDead, base, nil},
	}
	for _, c := range cases {
		t.Run(string(c.from), func(t *testing.T) {
			t.Parallel()
			w := worker.Restore(snapshotIn(c.from))
			want := w.Snapshot()
			want.Status = c.wantStatus
			want.LastHeartbeatAt = c.wantBeatAt
			events, err := w.Heartbeat(now)
			if c.wantErr != nil {
				require.ErrorIs(t, err, c.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.wantEvents, events)
			require.Equal(t, want, w.Snapshot())
		})
	}
}

func TestDrain(t *testing.T) {
	t.Parallel()
	for _, from := range []worker.Status{worker.StatusActive, worker.StatusStale, worker.StatusDead} {
		t.Run(string(from), func(t *testing.T) {
			t.Parallel()
			w := worker.Restore(snapshotIn(from))
			require.False(t, w.Draining())
			now := at(time.Minute)
			events := w.Drain(now)
			require.Equal(t, []event.Event{workerEvent(event.WorkerDraining, from, from, []string{"emails", "reports"}, now)}, events)
			want := snapshotIn(from)
			want.Draining = true
			require.Equal(t, want, w.Snapshot(), "only the drain flag changes")
			require.True(t, w.Draining())

			require.Empty(t, w.Drain(at(2*time.Minute)), "a repeated drain changes nothing")
			require.Equal(t, want, w.Snapshot())

			// Heartbeats and signs of life leave the flag alone.
			if from != worker.StatusDead {
				_, err := w.Heartbeat(at(3 * time.Minute))
				require.NoError(t, err)
				require.True(t, w.Draining())
			}
		})
	}
}

func TestCanClaim(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status  worker.Status
		wantErr error
	}{
		{worker.StatusActive, nil},
		{worker.StatusStale, nil},
		{worker.StatusDead, worker.ErrDead},
	}
	for _, c := range cases {
		t.Run(string(c.status), func(t *testing.T) {
			t.Parallel()
			err := worker.Restore(snapshotIn(c.status)).CanClaim()
			if c.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.wantErr)
		})
	}
}

func TestCheckLiveness(t *testing.T) {
	t.Parallel()
	queues := []string{"emails", "reports"}
	cases := []struct {
		name       string
		from       worker.Status
		lastBeat   time.Time
		now        time.Time
		wantStatus worker.Status
		wantEvent  *event.Event
	}{
		{"ACTIVE fresh stays ACTIVE", worker.StatusActive, base, at(29 * time.Second), worker.StatusActive, nil},
		{"ACTIVE -> STALE at the stale threshold", worker.StatusActive, base, at(30 * time.Second), worker.StatusStale,
			&event.Event{Type: event.WorkerStale, From: "ACTIVE", To: "STALE"}},
		{"ACTIVE -> STALE between thresholds", worker.StatusActive, base, at(time.Minute), worker.StatusStale,
			&event.Event{Type: event.WorkerStale, From: "ACTIVE", To: "STALE"}},
		{"ACTIVE -> DEAD directly when silent past the dead threshold", worker.StatusActive, base, at(5 * time.Minute), worker.StatusDead,
			&event.Event{Type: event.WorkerDied, From: "ACTIVE", To: "DEAD"}},
		{"ACTIVE -> DEAD exactly at the dead threshold", worker.StatusActive, base, at(120 * time.Second), worker.StatusDead,
			&event.Event{Type: event.WorkerDied, From: "ACTIVE", To: "DEAD"}},
		{"STALE still silent stays STALE", worker.StatusStale, base, at(time.Minute), worker.StatusStale, nil},
		{"STALE -> DEAD", worker.StatusStale, base, at(120 * time.Second), worker.StatusDead,
			&event.Event{Type: event.WorkerDied, From: "STALE", To: "DEAD"}},
		{"STALE with a fresh heartbeat is not revived here", worker.StatusStale, at(time.Minute), at(time.Minute + time.Second), worker.StatusStale, nil},
		{"DEAD stays DEAD", worker.StatusDead, base, at(time.Hour), worker.StatusDead, nil},
		{"DEAD with a fresh heartbeat stays DEAD", worker.StatusDead, at(time.Hour), at(time.Hour), worker.StatusDead, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := snapshotIn(c.from)
			s.LastHeartbeatAt = c.lastBeat
			w := worker.Restore(s)
			want := w.Snapshot()
			want.Status = c.wantStatus

			ev, changed := w.CheckLiveness(cfg, c.now)
			require.Equal(t, want, w.Snapshot(), "only the status may change")
			if c.wantEvent == nil {
				require.False(t, changed)
				require.Equal(t, event.Event{}, ev)
				return
			}
			require.True(t, changed)
			wantEvent := workerEvent(c.wantEvent.Type, worker.Status(c.wantEvent.From), worker.Status(c.wantEvent.To), queues, c.now)
			require.Equal(t, wantEvent, ev)

			// A second check at the same time changes nothing more.
			ev, changed = w.CheckLiveness(cfg, c.now)
			require.False(t, changed)
			require.Equal(t, event.Event{}, ev)
			require.Equal(t, want, w.Snapshot())
		})
	}
}

func TestSnapshotIsACopy(t *testing.T) {
	t.Parallel()
	s := snapshotIn(worker.StatusActive)
	w := worker.Restore(s)
	s.Queues[0] = "changed-after-restore"
	s.Tags[0] = "changed-after-restore"

	got := w.Snapshot()
	require.Equal(t, []string{"emails", "reports"}, got.Queues)
	require.Equal(t, []string{"eu"}, got.Tags)
	got.Queues[0], got.Tags[0] = "x", "x"
	w.Queues()[1] = "x"
	w.Tags()[0] = "x"
	require.Equal(t, snapshotIn(worker.StatusActive), w.Snapshot())
}
