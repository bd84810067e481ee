package task_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func TestValidateLeaseSeconds(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 300, 43200} {
		require.NoError(t, task.ValidateLeaseSeconds("lease_seconds", n), n)
	}
	for _, n := range []int{-1, 0, 43201} {
		err := task.ValidateLeaseSeconds("lease_seconds", n)
		var v *validation.Error
		require.ErrorAs(t, err, &v, n)
		require.Equal(t, []string{"lease_seconds"}, fields(v))
	}
}

func TestClaimRefusesAnInvalidLease(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, task.MaxLeaseSeconds + 1} {
		tk := task.Restore(pending())
		before := tk.Snapshot()
		_, err := tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: []string{"eu"}, LeaseID: leaseID, LeaseSeconds: n}, at(time.Minute))
		var v *validation.Error
		require.ErrorAs(t, err, &v)
		require.Equal(t, before, tk.Snapshot())
	}
}

func TestLeaseExpired(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		snap task.Snapshot
		now  time.Time
		want bool
	}{
		{"RUNNING, lease runs out later", running(1), at(65*time.Second - time.Microsecond), false},
		{"RUNNING, lease runs out exactly now", running(1), at(65 * time.Second), true},
		{"RUNNING, lease ran out", running(1), at(time.Hour), true},
		{"RUNNING without a lease (never)", func() task.Snapshot { s := running(1); s.LeaseExpiresAt = nil; return s }(), at(time.Hour), false},
		{"PENDING", pending(), at(time.Hour), false},
		{"DONE", done(), at(time.Hour), false},
		{"DEAD", dead(), at(time.Hour), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.snap)
			require.Equal(t, c.want, tk.LeaseExpired(c.now))
			if c.snap.Status != task.StatusRunning {
				return
			}
			before := tk.Snapshot()
			_, err := tk.ExpireLease(c.now)
			if c.want {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, task.ErrLeaseNotExpired)
			require.Equal(t, before, tk.Snapshot())
		})
	}
}

func TestExtendLease(t *testing.T) {
	t.Parallel()
	now := at(30 * time.Second)
	cases := []struct {
		name string
		p    task.ExtendParams
		// wantSeconds is the lease length after; the lease runs out that
		// long after now.
		wantSeconds int
	}{
		{"longer", task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(600)}, 600},
		{"shorter: the holder asks for less", task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(1)}, 1},
		{"the longest", task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(task.MaxLeaseSeconds)}, task.MaxLeaseSeconds},
		{"renewal keeps the length", task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, leaseSeconds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(running(1))
			require.NoError(t, tk.ExtendLease(c.p, now))
			want := running(1)
			want.LeaseSeconds = c.wantSeconds
			want.LeaseExpiresAt = ptr(now.Add(time.Duration(c.wantSeconds) * time.Second))
			want.UpdatedAt = now
			require.Equal(t, want, tk.Snapshot())
		})
	}

	t.Run("a lease that ran out is still the holder's until it is taken back", func(t *testing.T) {
		t.Parallel()
		tk := task.Restore(running(1))
		require.NoError(t, tk.ExtendLease(task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, at(time.Hour)))
		require.Equal(t, at(time.Hour+time.Minute), *tk.Snapshot().LeaseExpiresAt)
	})
	t.Run("a cancel request stays", func(t *testing.T) {
		t.Parallel()
		tk := task.Restore(cancelRequested(1))
		require.NoError(t, tk.ExtendLease(task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, now))
		require.True(t, tk.CancelRequested())
	})
}

func TestExtendLeaseRefusals(t *testing.T) {
	t.Parallel()
	now := at(30 * time.Second)
	type refusal int
	const (
		leaseLost refusal = iota
		transition
		invalid
	)
	requeued := func() task.Snapshot {
		s := running(1)
		backToPending(&s, at(20*time.Second), at(20*time.Second))
		return s
	}
	cases := []struct {
		name  string
		start task.Snapshot
		p     task.ExtendParams
		want  refusal
	}{
		{"another worker", running(1), task.ExtendParams{WorkerID: "worker-2", LeaseID: leaseID}, leaseLost},
		{"a stale lease", running(1), task.ExtendParams{WorkerID: holder, LeaseID: staleID}, leaseLost},
		{"the nil lease", running(1), task.ExtendParams{WorkerID: holder}, leaseLost},
		{"a task taken back and PENDING again", requeued(), task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, leaseLost},
		{"a DONE task", done(), task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, transition},
		{"a DEAD task", dead(), task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, transition},
		{"a negative lease", running(1), task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(-1)}, invalid},
		{"a lease over 12 h", running(1), task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(task.MaxLeaseSeconds + 1)}, invalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.start)
			before := tk.Snapshot()
			err := tk.ExtendLease(c.p, now)
			switch c.want {
			case leaseLost:
				var lerr *task.LeaseError
				require.ErrorAs(t, err, &lerr)
				require.Equal(t, c.start.Status, lerr.Status)
			case transition:
				var terr *task.TransitionError
				require.ErrorAs(t, err, &terr)
				require.Equal(t, c.start.Status, terr.From)
				require.NotErrorIs(t, err, task.ErrLeaseLost)
			case invalid:
				var v *validation.Error
				require.ErrorAs(t, err, &v)
			}
			require.Equal(t, before, tk.Snapshot())
		})
	}
}

// A holder whose task was taken back (lease expired, orphaned, worker
// declared dead) and is PENDING again has lost its lease: its reports are
// lease errors naming PENDING. Once the task is claimed again they are lease
// errors naming RUNNING; once it is finished, transition errors.
func TestFencingAfterTakeBack(t *testing.T) {
	t.Parallel()
	takeBacks := map[string]func(*task.Task) error{
		"lease expired": func(tk *task.Task) error { _, err := tk.ExpireLease(at(2 * time.Minute)); return err },
		"orphaned": func(tk *task.Task) error {
			_, err := tk.ReleaseOrphan(task.NewListing(holder, nil, time.Second), at(2*time.Minute))
			return err
		},
		"worker dead": func(tk *task.Task) error {
			_, err := tk.ReleaseFromDeadWorker(task.Holder{WorkerID: holder, LeaseID: leaseID}, at(2*time.Minute))
			return err
		},
	}
	reports := map[string]func(*task.Task) error{
		"complete": func(tk *task.Task) error {
			_, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID, Result: json.RawMessage(`1`)}, at(3*time.Minute))
			return err
		},
		"fail": func(tk *task.Task) error {
			_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: "late", Retryable: true}, policy, at(3*time.Minute))
			return err
		},
		"extend": func(tk *task.Task) error {
			return tk.ExtendLease(task.ExtendParams{WorkerID: holder, LeaseID: leaseID}, at(3*time.Minute))
		},
	}
	for tbName, takeBack := range takeBacks {
		for rName, report := range reports {
			t.Run(rName+" after "+tbName, func(t *testing.T) {
				t.Parallel()
				tk := task.Restore(running(1))
				require.NoError(t, takeBack(tk))
				require.Equal(t, task.StatusPending, tk.Status())

				before := tk.Snapshot()
				err := report(tk)
				var lerr *task.LeaseError
				require.ErrorAs(t, err, &lerr)
				require.Equal(t, task.StatusPending, lerr.Status)
				require.Equal(t, before, tk.Snapshot())

				_, err = tk.Claim(task.ClaimParams{WorkerID: "worker-2", WorkerTags: []string{"eu"}, LeaseID: staleID, LeaseSeconds: leaseSeconds}, at(150*time.Second))
				require.NoError(t, err)
				err = report(tk)
				require.ErrorAs(t, err, &lerr)
				require.Equal(t, task.StatusRunning, lerr.Status)

				_, err = tk.Complete(task.CompleteParams{WorkerID: "worker-2", LeaseID: staleID}, at(160*time.Second))
				require.NoError(t, err)
				err = report(tk)
				var terr *task.TransitionError
				require.ErrorAs(t, err, &terr)
				require.Equal(t, task.StatusDone, terr.From)
			})
		}
	}
}

func TestOrphaned(t *testing.T) {
	t.Parallel()
	const grace = 10 * time.Second
	claimed := at(5 * time.Second) // running(1)'s claim
	cases := []struct {
		name     string
		snap     task.Snapshot
		worker   string
		listed   []task.LeaseRef
		inFlight []string
		now      time.Time
		want     bool
	}{
		{"unlisted, claimed more than the grace ago", running(1), holder, nil, nil, claimed.Add(grace + time.Microsecond), true},
		{"unlisted, claimed exactly the grace ago", running(1), holder, nil, nil, claimed.Add(grace), false},
		{"unlisted, claimed just now", running(1), holder, nil, nil, claimed, false},
		{"listed under its lease", running(1), holder, []task.LeaseRef{{ID: taskID, LeaseID: leaseID}}, nil, at(time.Hour), false},
		{"listed under a stale lease", running(1), holder, []task.LeaseRef{{ID: taskID, LeaseID: staleID}}, nil, at(time.Hour), true},
		{"other tasks listed", running(1), holder, []task.LeaseRef{{ID: staleID, LeaseID: leaseID}}, nil, at(time.Hour), true},
		{"held by another worker", running(1), "worker-2", nil, nil, at(time.Hour), false},
		{"after a cancel request", cancelRequested(1), holder, nil, nil, at(time.Hour), true},
		{"PENDING", pending(), holder, nil, nil, at(time.Hour), false},
		{"DONE", done(), holder, nil, nil, at(time.Hour), false},
		{"DEAD", dead(), holder, nil, nil, at(time.Hour), false},
		{"unlisted, made RUNNING by a claim in flight", fromClaim(running(1), "c-1"), holder, nil, []string{"c-1"}, at(time.Hour), false},
		{"unlisted, another claim in flight", fromClaim(running(1), "c-1"), holder, nil, []string{"c-2"}, at(time.Hour), true},
		{"unlisted, claimed without a request id, a claim in flight", running(1), holder, nil, []string{"c-1"}, at(time.Hour), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			l := task.NewListing(c.worker, c.listed, grace).WithClaimsInFlight(c.inFlight)
			tk := task.Restore(c.snap)
			require.Equal(t, c.want, tk.Orphaned(l, c.now))
			before := tk.Snapshot()
			ev, err := tk.ReleaseOrphan(l, c.now)
			switch {
			case c.want:
				require.NoError(t, err)
				want := "orphaned"
				if c.snap.CancelRequestedAt != nil {
					want = "cancelled"
				}
				require.Equal(t, want, ev.Reason)
			case c.snap.Status != task.StatusRunning:
				var terr *task.TransitionError
				require.ErrorAs(t, err, &terr)
				require.Equal(t, before, tk.Snapshot())
			default:
				require.ErrorIs(t, err, task.ErrNotOrphaned)
				require.Equal(t, event.Event{}, ev)
				require.Equal(t, before, tk.Snapshot())
			}
		})
	}
}

// fromClaim is s as made RUNNING by the claim with this request id.
func fromClaim(s task.Snapshot, requestID string) task.Snapshot {
	s.ClaimRequestID = requestID
	return s
}

func TestListingLost(t *testing.T) {
	t.Parallel()
	otherID := uuid.MustParse("44444444-4444-4444-8444-444444444444")
	goneID := uuid.MustParse("55555555-5555-4555-8555-555555555555")
	held := task.Restore(running(1))
	other := running(1)
	other.ID = otherID
	refs := []task.LeaseRef{
		{ID: goneID, LeaseID: leaseID},  // not among the worker's tasks
		{ID: taskID, LeaseID: leaseID},  // held
		{ID: otherID, LeaseID: staleID}, // held under another lease
	}
	l := task.NewListing(holder, refs, time.Second)
	require.Equal(t, []task.LeaseRef{refs[0], refs[2]}, l.Lost(refs, []*task.Task{held, task.Restore(other)}))
	require.Equal(t, []task.LeaseRef{}, l.Lost(nil, []*task.Task{held}))
	require.Equal(t, refs, task.NewListing("worker-2", refs, time.Second).Lost(refs, []*task.Task{held}),
		"a task held by another worker is lost to this one")
}

func TestHeldByAndCancelRequested(t *testing.T) {
	t.Parallel()
	r := task.Restore(running(1))
	require.True(t, r.HeldBy(holder, leaseID))
	require.False(t, r.HeldBy(holder, staleID))
	require.False(t, r.HeldBy("worker-2", leaseID))
	require.False(t, r.CancelRequested())
	require.True(t, task.Restore(cancelRequested(1)).CancelRequested())
	require.False(t, task.Restore(done()).HeldBy("", uuid.Nil))
}

func TestReasonsAreListed(t *testing.T) {
	t.Parallel()
	require.Equal(t, []task.DeadReason{"exhausted", "non_retryable", "worker_dead", "deadline", "cancelled", "lease_expired", "orphaned", "dependency_failed", "dependency_skipped"}, task.DeadReasons)
	require.Equal(t, []task.RequeueReason{"failed", "worker_dead", "lease_expired", "orphaned", "retried", "snoozed", "released", "timed_out"}, task.RequeueReasons)
}
