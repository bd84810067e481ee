package postgres_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// bulkFixture is a pipeline with the bulk use cases over it.
type bulkFixture struct {
	*pipeline
	bulk *application.BulkService
}

func newBulkFixture(t *testing.T, cfg application.BulkConfig) *bulkFixture {
	p := newPipeline(t)
	return &bulkFixture{pipeline: p, bulk: application.NewBulkService(p.tx, cfg)}
}

// submit submits a task of the fixture's queue.
func (f *bulkFixture) submit(p task.SubmitParams) *task.Task {
	f.t.Helper()
	if p.Queue == "" {
		p.Queue = f.queue
	}
	if p.MaxAttempts == nil {
		p.MaxAttempts = ptr(1)
	}
	out, _, err := f.tasks.Submit(f.t.Context(), p)
	require.NoError(f.t, err)
	return out
}

// kill submits a task, claims it and fails it with msg on its only attempt
// (DEAD exhausted).
func (f *bulkFixture) kill(p task.SubmitParams, msg string) *task.Task {
	f.t.Helper()
	t := f.submit(p)
	claimed := f.claimAll()
	require.Contains(f.t, claimed, t.ID(), "the queue must hold no other claimable task")
	f.fail(claimed[t.ID()], msg)
	return t
}

// search lists the tasks f matches (newest first).
func (f *bulkFixture) search(flt task.Filter) []uuid.UUID {
	f.t.Helper()
	var out []*task.Task
	require.NoError(f.t, f.tx.Run(f.t.Context(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, _, err = st.Bulk.Search(ctx, ports.BulkBatchParams{Filter: flt, Limit: 1000}, 0)
		return err
	}))
	return taskIDs(out)
}

// The filter's SQL selects exactly the tasks the domain's Matches accepts,
// field by field and combined, over tasks in every status.
func TestBulkFilterAgreesWithDomain(t *testing.T) {
	t.Parallel()
	f := newBulkFixture(t, application.BulkConfig{})
	other := "other-" + uuid.NewString()
	f.kill(task.SubmitParams{IdempotencyKey: "order-17"}, "Connection REFUSED by upstream")
	f.kill(task.SubmitParams{}, "timeout")
	running := f.submit(task.SubmitParams{})
	claimed := f.claimAll()
	_, err := f.tasks.Cancel(t.Context(), running.ID())
	require.NoError(t, err)
	require.Contains(t, claimed, running.ID())
	mid := time.Now()
	time.Sleep(2 * time.Millisecond)
	f.graph([]string{"a"}, []string{"b", "a"}) // PENDING and BLOCKED
	f.submit(task.SubmitParams{Queue: other, IdempotencyKey: "ORDER-18"})
	(&storeFixture{t: t, db: f.db}).exec(`UPDATE tasks SET group_key = 'tenant-1' WHERE idempotency_key = 'order-17'`)
	(&storeFixture{t: t, db: f.db}).exec(`UPDATE tasks SET metadata = '{"tenant": "acme", "region": "eu"}' WHERE idempotency_key = 'order-17'`)
	(&storeFixture{t: t, db: f.db}).exec(`UPDATE tasks SET metadata = '{"tenant": "acme"}' WHERE idempotency_key = 'ORDER-18'`)

	var all []*task.Task
	require.NoError(t, f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		var err error
		all, _, err = st.Bulk.Search(ctx, ports.BulkBatchParams{Limit: 1000}, 0)
		return err
	}))
	require.Len(t, all, 6)
	later := time.Now().Add(time.Hour)
	filters := []task.Filter{
		{},
		{Queue: f.queue},
		{Statuses: []task.Status{task.StatusDead}},
		{Statuses: []task.Status{task.StatusPending, task.StatusBlocked}},
		{DeadReason: task.DeadExhausted},
		{CreatedAfter: &mid},
		{CreatedBefore: &mid},
		{CreatedAfter: &mid, CreatedBefore: &later},
		{ErrorContains: "refused"},
		{ErrorContains: "TIME"},
		{Text: "order-1"},
		{Text: "refused"},
		{UpdatedBefore: &mid},
		{WithoutCancelRequest: true},
		{Queue: f.queue, Statuses: []task.Status{task.StatusDead}, ErrorContains: "out"},
		{GroupKey: "tenant-1"},
		{GroupKey: "tenant-2"},
		{Metadata: map[string]string{"tenant": "acme"}},
		{Metadata: map[string]string{"tenant": "acme", "region": "eu"}},
		{Metadata: map[string]string{"tenant": "acme", "region": "us"}},
		{Metadata: map[string]string{"region": ""}},
		{Queue: f.queue, Metadata: map[string]string{"tenant": "acme"}},
	}
	for _, flt := range filters {
		want := []uuid.UUID{}
		for _, x := range all {
			if flt.Matches(x) {
				want = append(want, x.ID())
			}
		}
		require.Equal(t, want, f.search(flt), "filter %+v", flt)
	}
	require.Len(t, f.search(task.Filter{GroupKey: "tenant-1"}), 1)
	require.Len(t, f.search(task.Filter{Metadata: map[string]string{"tenant": "acme"}}), 2)
}

// A retry in bulk skips the tasks whose unique key an unfinished task
// holds, and retries one task per free key, as single retries would.
func TestBulkRetrySkipsTakenUniqueKeys(t *testing.T) {
	t.Parallel()
	f := newBulkFixture(t, application.BulkConfig{})
	held := f.kill(task.SubmitParams{UniqueKey: ptr("k")}, "x")
	f.submit(task.SubmitParams{UniqueKey: ptr("k"), RunAt: ptr(time.Now().Add(time.Hour))}) // holds k
	first := f.kill(task.SubmitParams{UniqueKey: ptr("l")}, "x")
	second := f.kill(task.SubmitParams{UniqueKey: ptr("l")}, "x")
	plain := f.kill(task.SubmitParams{}, "x")

	res, err := f.bulk.BulkRetry(t.Context(), ports.BulkCommand{Filter: task.Filter{Queue: f.queue}})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Matched)
	require.EqualValues(t, 2, *res.Changed)
	require.EqualValues(t, 2, *res.Skipped)
	st := func(x *task.Task) task.Status { s, _, _ := f.status(x.ID()); return s }
	require.Equal(t, task.StatusDead, st(held))
	require.Equal(t, task.StatusPending, st(first), "the first by id takes the free key")
	require.Equal(t, task.StatusDead, st(second))
	require.Equal(t, task.StatusPending, st(plain))
}

// A purge of PENDING tasks removes them and nothing else (RUNNING stays),
// with one task.purged each; their BLOCKED dependants end DEAD
// dependency_failed in the same transaction.
func TestPurgeRemovesOnlyItsStatusAndEndsDependants(t *testing.T) {
	t.Parallel()
	f := newBulkFixture(t, application.BulkConfig{BatchSize: 2})
	running := f.submit(task.SubmitParams{})
	require.Contains(t, f.claimAll(), running.ID())
	dead := f.kill(task.SubmitParams{}, "x")
	g := f.graph([]string{"a"}, []string{"b", "a"}, []string{"c"})

	res, err := f.bulk.Purge(t.Context(), ports.PurgeCommand{Queue: f.queue, DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Matched)
	require.Nil(t, res.Changed)

	res, err = f.bulk.Purge(t.Context(), ports.PurgeCommand{Queue: f.queue})
	require.NoError(t, err)
	require.EqualValues(t, 2, *res.Changed)
	require.EqualValues(t, 0, *res.Skipped)
	var left int
	require.NoError(t, f.db.GetContext(t.Context(), &left, `SELECT count(*) FROM tasks WHERE id = ANY($1::uuid[])`,
		[]string{g[0].ID().String(), g[2].ID().String()}))
	require.Zero(t, left)
	s, _, _ := f.status(running.ID())
	require.Equal(t, task.StatusRunning, s)
	s, _, _ = f.status(dead.ID())
	require.Equal(t, task.StatusDead, s)
	s, reason, _ := f.status(g[1].ID())
	require.Equal(t, task.StatusDead, s)
	require.Equal(t, task.DeadDependencyFailed, reason)
	require.Equal(t, []transition{{event.TaskSubmitted, "", "PENDING", ""}, {event.TaskPurged, "PENDING", "", ""}},
		transitions(f.events(g[0].ID())))
	require.Equal(t, []transition{{event.TaskSubmitted, "", "BLOCKED", ""}, {event.TaskDeadLettered, "BLOCKED", "DEAD", "dependency_failed"}},
		transitions(f.events(g[1].ID())))
}

// A batch skips the rows another transaction holds instead of waiting for
// them (a claim is never blocked, nor blocks a bulk action); a later run
// takes them.
func TestBulkSkipsLockedTasksWithoutWaiting(t *testing.T) {
	t.Parallel()
	f := newBulkFixture(t, application.BulkConfig{MaxPasses: 2, PassPause: time.Millisecond})
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, f.submit(task.SubmitParams{}).ID())
	}
	lock, err := f.db.BeginTxx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.ExecContext(t.Context(), `SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, ids[1])
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := f.bulk.BulkCancel(ctx, ports.BulkCommand{Filter: task.Filter{Queue: f.queue}})
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Matched)
	require.EqualValues(t, 2, *res.Changed)
	require.EqualValues(t, 1, *res.Skipped)
	s, _, _ := f.status(ids[1])
	require.Equal(t, task.StatusPending, s)
	require.NoError(t, lock.Rollback())

	res, err = f.bulk.BulkCancel(ctx, ports.BulkCommand{Filter: task.Filter{Queue: f.queue}})
	require.NoError(t, err)
	require.EqualValues(t, 1, *res.Changed)
	for _, id := range ids {
		s, reason, _ := f.status(id)
		require.Equal(t, task.StatusDead, s)
		require.Equal(t, task.DeadCancelled, reason)
		require.Len(t, slices.DeleteFunc(f.events(id), func(e event.Event) bool { return e.Type != event.TaskDeadLettered }), 1)
	}
}

// A large purge is a job: it survives the service that accepted it (here
// another BulkService, as another instance, finishes it) and reports its
// progress.
func TestPurgeJobResumesOnAnotherInstance(t *testing.T) {
	t.Parallel()
	cfg := application.BulkConfig{PurgeSyncLimit: 3, BatchSize: 2, PurgeBatchesPerCycle: 1}
	f := newBulkFixture(t, cfg)
	for range 5 {
		f.submit(task.SubmitParams{})
	}
	res, err := f.bulk.Purge(t.Context(), ports.PurgeCommand{Queue: f.queue, Status: task.StatusPending})
	require.NoError(t, err)
	require.NotNil(t, res.Job)
	require.Nil(t, res.Changed)
	require.Equal(t, task.PurgeRunning, res.Job.State)
	require.EqualValues(t, 5, res.Job.Matched)

	rep, err := f.bulk.RunPurgeJobs(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 2, rep.Removed)
	job, err := f.bulk.PurgeJob(t.Context(), f.queue, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, task.PurgeRunning, job.State)
	require.EqualValues(t, 2, job.Removed)

	other := application.NewBulkService(f.tx, application.BulkConfig{BatchSize: 2})
	rep, err = other.RunPurgeJobs(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 3, rep.Removed)
	require.Equal(t, 1, rep.Finished)
	job, err = f.bulk.PurgeJob(t.Context(), f.queue, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, task.PurgeDone, job.State)
	require.EqualValues(t, 5, job.Removed)
	require.NotNil(t, job.FinishedAt)
	require.Empty(t, f.search(task.Filter{Queue: f.queue}))

	_, err = f.bulk.PurgeJob(t.Context(), "elsewhere", res.Job.ID)
	require.ErrorIs(t, err, ports.ErrPurgeJobNotFound)
	rep, err = other.RunPurgeJobs(t.Context())
	require.NoError(t, err)
	require.True(t, rep.Idle())
}
