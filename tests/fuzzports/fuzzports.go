// Package fuzzports stands in for the database behind the use cases, so that
// fuzz targets can drive the request path (HTTP decoding, the use cases'
// validation, the domain's rules, response encoding) tens of thousands of
// times a second. Decoding and validation run before any store is called;
// what the stores then do is not what is fuzzed here: the storage boundary
// has its own differential fuzz target against the real database
// (adapters/postgres FuzzJSONStoredSizeAgreesWithPostgreSQL), and every other
// test runs on the real PostgreSQL adapter.
//
// Every transaction sees the same fixed world and keeps nothing: every
// worker exists and is ACTIVE; every task id names a RUNNING task held by
// Holder under Lease; a claim finds one task; listings find none. JSON values
// are checked with the real adapter's rule (postgres.JSONStoredSize), and the
// texts of filters with PostgreSQL's rule for text (validation.Text, which
// the adapter's FuzzTextAgreesWithPostgreSQL checks against the database):
// a filter that would reach PostgreSQL with invalid UTF-8 or NUL fails here
// as it would there, with an error the request path turns into a 500.
package fuzzports

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// The fixed world.
var (
	// Holder holds every task.
	Holder = "w"
	// Lease is every task's lease.
	Lease = uuid.MustParse("7db3c9a2-2c1a-4bfe-8d6e-6a1f0c7b9e11")
	// Now is the database time of every transaction.
	Now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

// TxRunner implements ports.TxRunner over the fixed world.
type TxRunner struct{}

var _ ports.TxRunner = TxRunner{}

// Run implements ports.TxRunner: fn runs on stores over the fixed world.
func (TxRunner) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	return fn(ctx, ports.Stores{Tasks: tasks{}, Workers: workers{}, Outbox: discard{}, Schedules: schedules{}, Bulk: bulk{}, QueueSettings: queueSettings{},
		Limits: limits{}})
}

type discard struct{}

func (discard) Record(...event.Event) {}

// Running returns the RUNNING task id names.
func Running(id uuid.UUID) *task.Task {
	claimedAt, expires := Now.Add(-time.Minute), Now.Add(4*time.Minute)
	return task.Restore(task.Snapshot{
		ID: id, Queue: "q", Status: task.StatusRunning, Payload: json.RawMessage(`{"n":1}`),
		Attempts: 1, MaxAttempts: 3, WorkerID: Holder, LeaseID: Lease, RunAt: claimedAt,
		CreatedAt: claimedAt, ClaimedAt: &claimedAt, UpdatedAt: claimedAt,
		LeaseSeconds: 300, LeaseExpiresAt: &expires,
	})
}

type tasks struct{}

var _ ports.TaskStore = tasks{}

func (tasks) Create(_ context.Context, fn ports.TaskCreateFunc) (*task.Task, bool, error) {
	t, _, err := fn(Now)
	return t, err == nil, err
}

// CreateKeyed creates the task, as Create: no key has a holder.
func (s tasks) CreateKeyed(ctx context.Context, fn ports.TaskCreateFunc, _ ports.KeyRules) (*task.Task, bool, error) {
	return s.Create(ctx, fn)
}

func (tasks) Get(_ context.Context, id uuid.UUID) (*task.Task, error) { return Running(id), nil }

func (tasks) Update(_ context.Context, id uuid.UUID, fn ports.TaskUpdateFunc) (*task.Task, error) {
	t := Running(id)
	if _, err := fn(t, Now); err != nil {
		return nil, err
	}
	return t, nil
}

func (tasks) CreateMany(_ context.Context, fn ports.TaskCreateManyFunc) ([]*task.Task, []bool, error) {
	ts, _, err := fn(Now)
	if err != nil {
		return nil, nil, err
	}
	created := make([]bool, len(ts))
	for i := range created {
		created[i] = true
	}
	return ts, created, nil
}

func (tasks) UpdateEach(_ context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out := make([]ports.TaskResult, len(ids))
	for i, id := range ids {
		t := Running(id)
		_, err := fn(i, t, Now)
		out[i] = ports.TaskResult{ID: id, Task: t, Err: err}
	}
	return out, nil
}

func (tasks) CompleteEach(_ context.Context, items []ports.CompleteRef, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out := make([]ports.TaskResult, len(items))
	for i, it := range items {
		t := Running(it.ID)
		_, err := fn(i, t, Now)
		out[i] = ports.TaskResult{ID: it.ID, Task: t, Err: err}
	}
	return out, nil
}

func (s tasks) UpdateProgress(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	return s.UpdateEach(ctx, ids, fn)
}

func (tasks) TimedOutUnder(context.Context, string, []uuid.UUID) ([]uuid.UUID, error) {
	return nil, nil
}

func (tasks) MarkAwaited(_ context.Context, id uuid.UUID) (*task.Task, error) {
	return Running(id), nil
}

func (tasks) Statuses(_ context.Context, ids []uuid.UUID) (map[uuid.UUID]task.Status, error) {
	out := make(map[uuid.UUID]task.Status, len(ids))
	for _, id := range ids {
		out[id] = task.StatusRunning
	}
	return out, nil
}

func (tasks) Claim(_ context.Context, p ports.ClaimParams) ([]*task.Task, bool, error) {
	queue := "q"
	if len(p.Queues) > 0 {
		queue = p.Queues[0]
	}
	three := 3
	t, _, err := task.Submit(task.SubmitParams{ID: uuid.New(), Queue: queue, MaxAttempts: &three}, Now)
	if err != nil {
		return nil, false, err
	}
	if _, err := t.Claim(task.ClaimParams{WorkerID: p.WorkerID, WorkerTags: p.WorkerTags, LeaseID: uuid.New(), LeaseSeconds: p.LeaseSeconds, RequestID: p.RequestID}, Now); err != nil {
		return nil, false, err
	}
	return []*task.Task{t}, false, nil
}

func (s tasks) ClaimGroup(ctx context.Context, p ports.ClaimGroupParams) ([]ports.ClaimOutcome, error) {
	out := make([]ports.ClaimOutcome, len(p.Requests))
	for i, r := range p.Requests {
		ts, truncated, err := s.Claim(ctx, ports.ClaimParams{WorkerID: r.WorkerID, WorkerTags: p.WorkerTags, Queues: p.Queues,
			Limit: r.Limit, LeaseSeconds: r.LeaseSeconds, RequestID: r.RequestID, MaxBytes: r.MaxBytes})
		if err != nil {
			return nil, err
		}
		out[i] = ports.ClaimOutcome{Tasks: ts, Truncated: truncated}
	}
	return out, nil
}

func (tasks) ClaimedUnderEach(_ context.Context, refs []ports.ClaimRef) ([][]*task.Task, error) {
	out := make([][]*task.Task, len(refs))
	for i := range out {
		out[i] = []*task.Task{}
	}
	return out, nil
}

func (tasks) ClaimedUnder(context.Context, string, string) ([]*task.Task, error) {
	return []*task.Task{}, nil
}

func (tasks) Held(context.Context, string) ([]*task.Task, error) { return nil, nil }

func (tasks) UpdateHeld(context.Context, string, ports.TaskDecideFunc) ([]*task.Task, error) {
	return nil, nil
}

func (tasks) StoredJSONSize(raw json.RawMessage) (int64, error) {
	return postgres.JSONStoredSize(raw)
}

type workers struct{}

var _ ports.WorkerStore = workers{}

func active(id string) *worker.Worker {
	return worker.Restore(worker.Snapshot{ID: id, Status: worker.StatusActive, RegisteredAt: Now, LastHeartbeatAt: Now})
}

func (workers) Upsert(_ context.Context, id string, fn func(*worker.Worker, time.Time) (*worker.Worker, []event.Event, error)) (*worker.Worker, bool, error) {
	w, _, err := fn(nil, Now)
	return w, err == nil, err
}

func (workers) Get(_ context.Context, id string) (*worker.Worker, error) { return active(id), nil }

func (workers) Update(_ context.Context, id string, fn ports.WorkerUpdateFunc) (*worker.Worker, error) {
	w := active(id)
	if _, err := fn(w, Now); err != nil {
		return nil, err
	}
	return w, nil
}

func (workers) Touch(_ context.Context, id string, fn ports.WorkerTouchFunc) (*worker.Worker, error) {
	w := active(id)
	if _, _, err := fn(w, Now); err != nil {
		return nil, err
	}
	return w, nil
}

func (w workers) TouchLive(ctx context.Context, id string, fn ports.WorkerTouchFunc) (*worker.Worker, error) {
	return w.Touch(ctx, id, fn)
}

func (s workers) TouchEach(ctx context.Context, ids []string, fn ports.WorkerTouchFunc) ([]ports.WorkerResult, error) {
	out := make([]ports.WorkerResult, len(ids))
	for i, id := range ids {
		w, err := s.Touch(ctx, id, fn)
		out[i] = ports.WorkerResult{ID: id, Worker: w, Err: err}
	}
	return out, nil
}

func (s workers) TouchLiveEach(ctx context.Context, ids []string, fn ports.WorkerTouchFunc) ([]ports.WorkerResult, error) {
	return s.TouchEach(ctx, ids, fn)
}

func (workers) Owners(context.Context, []string) (map[string]string, error) {
	return map[string]string{}, nil
}

func (workers) List(context.Context) ([]*worker.Worker, error) { return []*worker.Worker{}, nil }

// Stats implements ports.StatsReader: no queue has tasks.
type Stats struct{}

// Queues implements ports.StatsReader.
func (Stats) Queues(_ context.Context, f ports.QueueFilter) (ports.QueuePage, error) {
	return ports.QueuePage{Queues: []ports.QueueStats{}}, texts(append([]string{f.Prefix, f.Pattern, f.After}, f.Visible...)...)
}

// Queue implements ports.StatsReader: no queue exists.
func (Stats) Queue(context.Context, string) (*ports.QueueDetail, error) {
	return nil, queue.ErrNotFound
}

// queueSettings implements ports.QueueSettingsStore: every queue starts
// without settings and keeps none.
type queueSettings struct{}

func (queueSettings) Update(_ context.Context, _ string, fn ports.QueueSettingsFunc) (queue.Settings, time.Time, error) {
	now := time.Unix(0, 0).UTC()
	s, _, err := fn(queue.Settings{}, now)
	return s, now, err
}

// limits implements ports.LimitStore: every named limit exists, none is
// kept.
type limits struct{}

func (limits) Put(_ context.Context, name string, fn ports.LimitPutFunc) (ports.LimitInfo, bool, error) {
	l, _, err := fn(nil, time.Unix(0, 0).UTC())
	return ports.LimitInfo{Limit: l, Queues: []string{}}, true, err
}

func (limits) Get(context.Context, string) (ports.LimitInfo, error) {
	return ports.LimitInfo{}, queue.ErrLimitNotFound
}

func (limits) List(context.Context) ([]ports.LimitInfo, error) { return []ports.LimitInfo{}, nil }

func (limits) Delete(context.Context, string, ports.LimitDeleteFunc) (queue.Limit, error) {
	return queue.Limit{}, queue.ErrLimitNotFound
}

func (limits) Missing(context.Context, []string) ([]string, error) { return nil, nil }

// Health implements ports.HealthChecker: always ready.
type Health struct{}

// Ready implements ports.HealthChecker.
func (Health) Ready(context.Context) error { return nil }

func (tasks) Attempts(context.Context, uuid.UUID) ([]task.Attempt, error) {
	return []task.Attempt{}, nil
}

func (tasks) DependsOn(context.Context, uuid.UUID) ([]ports.Parent, error) {
	return []ports.Parent{}, nil
}

func (tasks) Parents(context.Context, uuid.UUID, ports.PageParams) (ports.ParentsPage, error) {
	return ports.ParentsPage{Parents: []*task.Task{}}, nil
}

// LockTasks finds every named id: a task RUNNING like every other.
func (tasks) LockTasks(_ context.Context, p ports.LockParams) ([]*task.Task, error) {
	out := make([]*task.Task, len(p.IDs))
	for i, id := range p.IDs {
		out[i] = Running(id)
	}
	return out, nil
}

func (tasks) CreateGraph(_ context.Context, fn ports.TaskGraphFunc) ([]*task.Task, error) {
	g, err := fn(Now)
	if err != nil {
		return nil, err
	}
	return g.Tasks, nil
}

// schedules is the fixed world's schedule store: a creation runs its
// function (every rule of a new schedule) and keeps nothing; every name
// names a schedule of queue "q" ticking every hour, which updates and
// deletions hand to their functions.
type schedules struct{}

var _ ports.ScheduleStore = schedules{}

// existing returns the schedule every name names.
func existing(name string) *schedule.Schedule {
	next := Now.Add(time.Hour)
	return schedule.Restore(schedule.Snapshot{Name: name, Cron: "@every 1h", Timezone: "UTC",
		Task: task.SubmitParams{Queue: "q"}, Overlap: schedule.OverlapSkip, NextRunAt: &next, CreatedAt: Now, UpdatedAt: Now})
}

func (schedules) Create(_ context.Context, fn ports.ScheduleCreateFunc) (*schedule.Schedule, error) {
	s, _, err := fn(Now)
	return s, err
}

func (schedules) Get(_ context.Context, name string) (*schedule.Schedule, error) {
	return existing(name), nil
}

func (schedules) List(context.Context, []string) ([]*schedule.Schedule, error) {
	return []*schedule.Schedule{}, nil
}

func (schedules) Update(_ context.Context, name string, fn ports.ScheduleUpdateFunc) (*schedule.Schedule, error) {
	s := existing(name)
	_, err := fn(s, Now)
	return s, err
}

func (schedules) Delete(_ context.Context, name string, fn ports.ScheduleUpdateFunc) (*schedule.Schedule, error) {
	s := existing(name)
	_, err := fn(s, Now)
	return s, err
}

func (schedules) UpdateDue(context.Context, int, ports.ScheduleTickFunc) ([]*schedule.Schedule, error) {
	return nil, nil
}

// bulk finds no task to list, count, change or purge, and no purge job.
type bulk struct{}

var _ ports.BulkStore = bulk{}

func (bulk) Count(_ context.Context, f task.Filter) (int64, time.Time, error) {
	return 0, Now, filterText(f, nil)
}

func (bulk) UpdateMatching(_ context.Context, p ports.BulkBatchParams, _ ports.TaskUpdateFunc) (ports.BulkBatch, error) {
	return ports.BulkBatch{Now: Now}, filterText(p.Filter, p.Visible)
}

func (bulk) PurgeMatching(_ context.Context, p ports.BulkBatchParams, _ ports.TaskUpdateFunc) (ports.BulkBatch, error) {
	return ports.BulkBatch{Now: Now}, filterText(p.Filter, p.Visible)
}

func (bulk) Search(_ context.Context, p ports.BulkBatchParams, _ int64) ([]*task.Task, bool, error) {
	return []*task.Task{}, false, filterText(p.Filter, p.Visible)
}

// errNotText is what PostgreSQL answers a statement given text that is not
// valid UTF-8 or holds NUL (SQLSTATE 22021): an unexpected error, a 500.
var errNotText = errors.New(`pq: invalid byte sequence for encoding "UTF8"`)

// texts fails as PostgreSQL would when one of ss is not text.
func texts(ss ...string) error {
	for _, s := range ss {
		if !validation.Text(s) {
			return errNotText
		}
	}
	return nil
}

// filterText fails as PostgreSQL would on a filter with a text that is not.
func filterText(f task.Filter, visible []string) error {
	ss := append([]string{f.Queue, f.GroupKey, f.ErrorContains, f.Text, string(f.DeadReason)}, visible...)
	for _, st := range f.Statuses {
		ss = append(ss, string(st))
	}
	return texts(ss...)
}

func (bulk) CreatePurgeJob(context.Context, *task.PurgeJob) error { return nil }

func (bulk) PurgeJob(context.Context, string, uuid.UUID) (*task.PurgeJob, error) {
	return nil, ports.ErrPurgeJobNotFound
}

func (bulk) LockRunningPurgeJob(context.Context) (*task.PurgeJob, error) { return nil, nil }

func (bulk) SavePurgeJob(context.Context, *task.PurgeJob) error { return nil }
