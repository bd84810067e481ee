package application_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// as returns ctx acting as a new key with p's scopes and limits.
func as(t *testing.T, s services, p apikey.CreateParams) context.Context {
	t.Helper()
	keys := application.NewKeyService(s.tx, application.KeyConfig{}, nil)
	p.Name = "k-" + uuid.NewString()
	k, _, err := keys.Create(t.Context(), p)
	require.NoError(t, err)
	return ports.WithPrincipal(t.Context(), k)
}

func forbidden(t *testing.T, err error) *apikey.ForbiddenError {
	t.Helper()
	var f *apikey.ForbiddenError
	require.ErrorAs(t, err, &f)
	return f
}

// A worker belongs to the key that registered it. Another work key may not
// register it again, heartbeat, claim or report as it: a report is refused
// with 403 whatever the task's state (never a 409 that would tell it), and a
// refused heartbeat leaves the worker's tasks as they were.
func TestWorkerBelongsToItsKey(t *testing.T) {
	t.Parallel()
	s := setup(t)
	work := []apikey.Scope{apikey.ScopeWork}
	a := as(t, s, apikey.CreateParams{Scopes: work})
	b := as(t, s, apikey.CreateParams{Scopes: work})
	admin := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeAdmin}})

	w, created, err := s.workers.Register(a, worker.RegisterParams{ID: "wa", Queues: []string{"q"}})
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, ports.Principal(a).OwnerID(), w.Owner())
	_, _, err = s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "q"})
	require.NoError(t, err)
	_, _, err = s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "q"})
	require.NoError(t, err)
	claimed, err := claimedTasks(s.tasks.Claim(a, ports.ClaimCommand{WorkerID: "wa", Limit: ptr(1)}))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	held := claimed[0].Snapshot()

	_, _, err = s.workers.Register(b, worker.RegisterParams{ID: "wa", Queues: []string{"q"}})
	require.Equal(t, "wa", forbidden(t, err).WorkerID)
	_, err = claimedTasks(s.tasks.Claim(b, ports.ClaimCommand{WorkerID: "wa"}))
	forbidden(t, err)
	_, err = s.workers.Heartbeat(b, ports.HeartbeatCommand{WorkerID: "wa", ListsTasks: true})
	forbidden(t, err)
	require.Equal(t, task.StatusRunning, s.get(t, held.ID).Status, "the refused heartbeat's empty listing orphaned nothing")

	lease := held.LeaseID
	wrong := uuid.New()
	for _, lid := range []*uuid.UUID{&lease, &wrong} {
		_, err = s.tasks.Complete(b, ports.CompleteCommand{TaskID: held.ID, WorkerID: "wa", LeaseID: lid})
		forbidden(t, err)
		_, err = s.tasks.Fail(b, ports.FailCommand{TaskID: held.ID, WorkerID: "wa", LeaseID: lid, Retryable: true})
		forbidden(t, err)
		_, err = s.tasks.Extend(b, ports.ExtendCommand{TaskID: held.ID, WorkerID: "wa", LeaseID: lid})
		forbidden(t, err)
		_, err = s.tasks.CompleteBatch(b, "wa", []ports.CompleteItem{{TaskID: held.ID, LeaseID: lid}})
		forbidden(t, err)
	}
	_, err = s.tasks.Complete(b, ports.CompleteCommand{TaskID: uuid.New(), WorkerID: "wa", LeaseID: &lease})
	forbidden(t, err) // a missing task too: the worker is checked first
	require.Equal(t, task.StatusRunning, s.get(t, held.ID).Status)

	// Its own key, and admin, may.
	_, err = s.workers.Heartbeat(a, ports.HeartbeatCommand{WorkerID: "wa"})
	require.NoError(t, err)
	_, err = s.tasks.Extend(admin, ports.ExtendCommand{TaskID: held.ID, WorkerID: "wa", LeaseID: &lease})
	require.NoError(t, err)
	done, err := s.tasks.Complete(a, ports.CompleteCommand{TaskID: held.ID, WorkerID: "wa", LeaseID: &lease})
	require.NoError(t, err)
	require.Equal(t, task.StatusDone, done.Status())
	// Re-registering by admin keeps the owner.
	w, _, err = s.workers.Register(admin, worker.RegisterParams{ID: "wa", Queues: []string{"q"}})
	require.NoError(t, err)
	require.Equal(t, ports.Principal(a).OwnerID(), w.Owner())
}

// A work key with a worker prefix acts only as workers whose id starts
// with it, and generated ids start with it.
func TestWorkerPrefix(t *testing.T) {
	t.Parallel()
	s := setup(t)
	a := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeWork}, WorkerPrefix: "fleet-a."})
	_, _, err := s.workers.Register(a, worker.RegisterParams{ID: "fleet-b.1"})
	require.Equal(t, "fleet-b.1", forbidden(t, err).WorkerID)
	w, _, err := s.workers.Register(a, worker.RegisterParams{})
	require.NoError(t, err)
	require.Regexp(t, `^fleet-a\.worker-`, w.ID())
	_, err = claimedTasks(s.tasks.Claim(a, ports.ClaimCommand{WorkerID: "fleet-b.1"}))
	forbidden(t, err)
	_, err = s.workers.Heartbeat(a, ports.HeartbeatCommand{WorkerID: "fleet-b.1"})
	forbidden(t, err)
}

// A key limited to some queues: names outside them are 403; tasks outside
// them are not found; listings, statistics and workers show its queues only.
func TestQueueLimitedKey(t *testing.T) {
	t.Parallel()
	s := setup(t)
	k := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeProduce, apikey.ScopeWork, apikey.ScopeRead}, Queues: []string{"emails-*"}})
	mine, _, err := s.tasks.Submit(k, task.SubmitParams{Queue: "emails-eu"})
	require.NoError(t, err)
	_, _, err = s.tasks.Submit(k, task.SubmitParams{Queue: "sms"})
	require.Equal(t, "sms", forbidden(t, err).Queue)
	_, _, err = s.tasks.SubmitBatch(k, []task.SubmitParams{{Queue: "emails-us"}, {Queue: "sms"}})
	require.Equal(t, "sms", forbidden(t, err).Queue, "the whole batch is refused")
	theirs, _, err := s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "sms"})
	require.NoError(t, err)

	_, err = s.tasks.Get(k, theirs.ID())
	require.ErrorIs(t, err, task.ErrNotFound)
	_, err = s.tasks.Get(k, mine.ID())
	require.NoError(t, err)
	_, err = s.tasks.Retry(k, theirs.ID())
	require.ErrorIs(t, err, task.ErrNotFound)
	listed, err := listedTasks(s.tasks.List(k, ports.ListQuery{}))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.Equal(t, mine.ID(), listed[0].ID())
	_, err = s.tasks.List(k, ports.ListQuery{Queue: "sms"})
	forbidden(t, err)

	_, _, err = s.workers.Register(k, worker.RegisterParams{ID: "any-queue"})
	require.Equal(t, "*", forbidden(t, err).Queue, "a limited key must name its queues")
	_, _, err = s.workers.Register(k, worker.RegisterParams{ID: "w", Queues: []string{"emails-eu", "sms"}})
	require.Equal(t, "sms", forbidden(t, err).Queue)
	_, _, err = s.workers.Register(k, worker.RegisterParams{ID: "w", Queues: []string{"emails-eu"}})
	require.NoError(t, err)
	_, _, err = s.workers.Register(t.Context(), worker.RegisterParams{ID: "other", Queues: []string{"sms"}})
	require.NoError(t, err)
	_, err = claimedTasks(s.tasks.Claim(k, ports.ClaimCommand{WorkerID: "w", Queue: "sms"}))
	forbidden(t, err)
	ws, err := s.workers.List(k)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	require.Equal(t, "w", ws[0].ID())

	// A report on a task outside the key's queues: as if it were missing.
	_, _, err = s.workers.Register(t.Context(), worker.RegisterParams{ID: "sms-w", Queues: []string{"sms"}})
	require.NoError(t, err)
	got, err := claimedTasks(s.tasks.Claim(t.Context(), ports.ClaimCommand{WorkerID: "sms-w"}))
	require.NoError(t, err)
	require.Len(t, got, 1)
	lease := got[0].Snapshot().LeaseID
	results, err := s.tasks.CompleteBatch(k, "w", []ports.CompleteItem{{TaskID: theirs.ID(), LeaseID: &lease}})
	require.NoError(t, err)
	require.ErrorIs(t, results[0].Err, task.ErrNotFound)
	require.Nil(t, results[0].Task, "nothing of the task is shown")
}

// Lease ids are shown to the holder's key and to admin only.
func TestLeaseIDsAreHiddenFromOtherKeys(t *testing.T) {
	t.Parallel()
	s := setup(t)
	a := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeWork, apikey.ScopeRead}})
	reader := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeRead, apikey.ScopeProduce}})
	admin := as(t, s, apikey.CreateParams{Scopes: []apikey.Scope{apikey.ScopeAdmin}})
	_, _, err := s.workers.Register(a, worker.RegisterParams{ID: "wa"})
	require.NoError(t, err)
	submitted, _, err := s.tasks.Submit(reader, task.SubmitParams{Queue: "q", IdempotencyKey: "once"})
	require.NoError(t, err)
	claimed, err := claimedTasks(s.tasks.Claim(a, ports.ClaimCommand{WorkerID: "wa"}))
	require.NoError(t, err)
	require.NotEqual(t, uuid.Nil, claimed[0].Snapshot().LeaseID, "the claimer sees its lease")
	lease := claimed[0].Snapshot().LeaseID

	leaseOf := func(ctx context.Context) uuid.UUID {
		t.Helper()
		got, err := s.tasks.Get(ctx, submitted.ID())
		require.NoError(t, err)
		listed, err := listedTasks(s.tasks.List(ctx, ports.ListQuery{}))
		require.NoError(t, err)
		require.Equal(t, got.Snapshot().LeaseID, listed[0].Snapshot().LeaseID)
		require.Equal(t, "wa", got.Snapshot().WorkerID, "the holder is no secret")
		return got.Snapshot().LeaseID
	}
	require.Equal(t, lease, leaseOf(a))
	require.Equal(t, lease, leaseOf(admin))
	require.Equal(t, lease, leaseOf(t.Context()), "authentication off")
	require.Equal(t, uuid.Nil, leaseOf(reader))
	again, created, err := s.tasks.Submit(reader, task.SubmitParams{Queue: "q", IdempotencyKey: "once"})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, uuid.Nil, again.Snapshot().LeaseID, "nor in the answer to a repeated submission")
	_, err = s.tasks.Complete(a, ports.CompleteCommand{TaskID: submitted.ID(), WorkerID: "wa", LeaseID: &lease})
	require.NoError(t, err, "hiding a lease id changes nothing stored")
}
