package postgres_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// The claim statements encode the domain's rule (claimEligible is
// task.Task.Claimable, claimAssign is task.Task.Claim): for tasks of every
// shape (status, run_at and deadline before, at and after the claim's now,
// tags against workers with and without tags), the statement claims exactly
// the tasks Claimable accepts, and leaves each exactly as Claim leaves it.
// Both statements: the general one (one request for up to 1,000 tasks) and
// the common case's (claimOneEachSQL: a request for one task per claimable
// task, each given the next in claim order).
func TestClaimStatementAgreesWithTheDomain(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runner := postgres.NewTxRunner(db)
	offsets := map[string]string{"before": "-1 hour", "at": "0 seconds", "after": "1 hour"}
	tagSets := [][]string{{}, {"a"}, {"a", "b"}, {"c"}}
	workerTags := [][]string{{}, {"a"}, {"a", "b"}, {"b", "c", "a"}}
	statuses := []task.Status{task.StatusPending, task.StatusRunning, task.StatusDone, task.StatusDead}

	for run, wt := range append(workerTags, workerTags...) {
		oneEach := run >= len(workerTags)
		queue := fmt.Sprintf("agree-%d", run)
		err := runner.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
			tx := postgres.TxOf(st)
			n := 0
			for _, status := range statuses {
				for _, runAt := range []string{"before", "at", "after"} {
					for _, deadline := range []string{"none", "before", "at", "after"} {
						for _, tags := range tagSets {
							dl := "NULL"
							if deadline != "none" {
								dl = "now() + interval '" + offsets[deadline] + "'"
							}
							worker, lease := "NULL", "NULL"
							if status == task.StatusRunning {
								worker, lease = "'someone'", "gen_random_uuid()"
							}
							_, err := tx.ExecContext(ctx, `
								INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts,
									worker_id, lease_id, deadline, run_at, created_at, updated_at, payload_bytes)
								VALUES ($1, $2, $3, $4, '{}', $5, 0, 3, `+worker+`, `+lease+`, `+dl+`,
									now() + interval '`+offsets[runAt]+`', now() - interval '1 minute', now() - interval '1 minute', 2)`,
								uuid.Must(uuid.NewV7()), queue, string(status), n%3, pq.StringArray(tags))
							if err != nil {
								return err
							}
							n++
						}
					}
				}
			}
			var ids []uuid.UUID
			if err := tx.SelectContext(ctx, &ids, `SELECT id FROM tasks WHERE queue = $1 ORDER BY id`, queue); err != nil {
				return err
			}
			var now time.Time
			if err := tx.GetContext(ctx, &now, `SELECT now()`); err != nil {
				return err
			}
			before := make([]*task.Task, len(ids))
			for i, id := range ids {
				var err error
				if before[i], err = st.Tasks.Get(ctx, id); err != nil {
					return err
				}
			}
			// Who claims: one worker for up to 1,000 tasks, or one request
			// per task, each for one.
			requests := []ports.ClaimRequest{{WorkerID: "w", Limit: 1000, LeaseSeconds: 120, RequestID: "r-1"}}
			if oneEach {
				requests = make([]ports.ClaimRequest, len(ids))
				for i := range requests {
					requests[i] = ports.ClaimRequest{WorkerID: fmt.Sprintf("w-%d", i), Limit: 1, LeaseSeconds: 120, RequestID: fmt.Sprintf("r-%d", i)}
				}
			}
			outs, err := st.Tasks.ClaimGroup(ctx, ports.ClaimGroupParams{Queues: []string{queue}, WorkerTags: wt, Requests: requests})
			if err != nil {
				return err
			}
			var claimed []*task.Task
			got := map[uuid.UUID]*task.Task{}
			by := map[uuid.UUID]ports.ClaimRequest{}
			for i, o := range outs {
				if oneEach {
					require.LessOrEqual(t, len(o.Tasks), 1)
				}
				for _, c := range o.Tasks {
					got[c.ID()] = c
					by[c.ID()] = requests[i]
					claimed = append(claimed, c)
				}
			}
			if oneEach {
				// The n-th request has the n-th claimable task in claim
				// order (priority, then submission: these tasks share a
				// round-robin rank).
				var order []*task.Task
				for _, pre := range before {
					if pre.Claimable(wt, now) {
						order = append(order, pre)
					}
				}
				sort.SliceStable(order, func(i, j int) bool { return order[i].Snapshot().Priority > order[j].Snapshot().Priority })
				for i, pre := range order {
					require.Len(t, outs[i].Tasks, 1)
					require.Equal(t, pre.ID(), outs[i].Tasks[0].ID(), "request %d has the %d-th task in claim order", i, i)
				}
			}
			accepted := 0
			for _, pre := range before {
				want := pre.Claimable(wt, now)
				c, ok := got[pre.ID()]
				require.Equal(t, want, ok, "worker tags %v, task %+v: Claimable says %v", wt, pre.Snapshot(), want)
				if !ok {
					continue
				}
				accepted++
				r := by[pre.ID()]
				_, err := pre.Claim(task.ClaimParams{WorkerID: r.WorkerID, WorkerTags: wt, LeaseID: c.Snapshot().LeaseID,
					LeaseSeconds: 120, RequestID: r.RequestID}, now)
				require.NoError(t, err)
				require.Equal(t, pre.Snapshot(), c.Snapshot(), "the statement leaves the task as task.Claim does")
			}
			require.Equal(t, accepted, len(claimed))
			require.Positive(t, accepted)
			return nil
		})
		require.NoError(t, err)
	}
}

// The common case's statement and the general one hand out the same tasks
// to the same requests: twin queues of tasks of mixed priorities and
// groups, claimed by three requests for one task each (claimOneEachSQL)
// and by the same three plus one for two (the general statement, which
// deals round-robin: the first three tasks go to the first three
// requests). Both take the head of the queue in claim order.
func TestTheCommonClaimDealsTheHeadLikeTheGeneralOne(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runner := postgres.NewTxRunner(db)
	err := runner.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		tx := postgres.TxOf(st)
		for _, queue := range []string{"head-a", "head-b"} {
			for i := range 12 {
				_, err := tx.ExecContext(ctx, `
					INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts, run_at, created_at, updated_at, grank)
					VALUES ($1, $2, 'PENDING', $3, '{}', '{}', 0, 3, now() - interval '1 minute', now(), now(), $4)`,
					uuid.Must(uuid.NewV7()), queue, (i*7)%3, i%4)
				if err != nil {
					return err
				}
			}
		}
		var want []uuid.UUID
		if err := tx.SelectContext(ctx, &want, `SELECT id FROM tasks WHERE queue = 'head-a' ORDER BY priority DESC, grank, seq LIMIT 3`); err != nil {
			return err
		}
		one := func(w string) ports.ClaimRequest {
			return ports.ClaimRequest{WorkerID: w, Limit: 1, LeaseSeconds: 60}
		}
		common, err := st.Tasks.ClaimGroup(ctx, ports.ClaimGroupParams{Queues: []string{"head-a"},
			Requests: []ports.ClaimRequest{one("w1"), one("w2"), one("w3")}})
		if err != nil {
			return err
		}
		general, err := st.Tasks.ClaimGroup(ctx, ports.ClaimGroupParams{Queues: []string{"head-b"},
			Requests: []ports.ClaimRequest{one("w1"), one("w2"), one("w3"), {WorkerID: "w4", Limit: 2, LeaseSeconds: 60}}})
		if err != nil {
			return err
		}
		for i, id := range want {
			require.Len(t, common[i].Tasks, 1)
			require.Equal(t, id, common[i].Tasks[0].ID(), "request %d has the %d-th task of the head", i+1, i+1)
			require.Equal(t, fmt.Sprintf("w%d", i+1), common[i].Tasks[0].Snapshot().WorkerID)
			// The twin queue's task at the same place went to the same request.
			a, b := common[i].Tasks[0].Snapshot(), general[i].Tasks[0].Snapshot()
			require.Equal(t, []any{a.Priority, a.WorkerID}, []any{b.Priority, b.WorkerID})
		}
		return nil
	})
	require.NoError(t, err)
}

// A push dispatcher's claim encodes task.Task.Deliverable: tasks of every
// shape in a push queue, claimed by a dispatcher, are claimed exactly when
// Deliverable accepts them (tags play no part), and left as task.Claim
// leaves them.
func TestPushClaimStatementAgreesWithTheDomain(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runner := postgres.NewTxRunner(db)
	offsets := map[string]string{"before": "-1 hour", "at": "0 seconds", "after": "1 hour"}
	err := runner.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		tx := postgres.TxOf(st)
		if _, err := tx.ExecContext(ctx, `INSERT INTO queue_settings (queue, updated_at, push_url, push_timeout_seconds,
			push_max_in_flight, push_header_names, push_non_retryable_statuses, push_secret, push_secret_rotated_at)
			VALUES ('hooks', now(), 'http://127.0.0.1:1/', 5, 10000, '{}', '{}', 'plain:', now())`); err != nil {
			return err
		}
		for _, status := range []task.Status{task.StatusPending, task.StatusRunning, task.StatusDone} {
			for _, runAt := range []string{"before", "at", "after"} {
				for _, deadline := range []string{"none", "before", "after"} {
					for _, tags := range [][]string{{}, {"a"}, {"a", "b"}} {
						dl := "NULL"
						if deadline != "none" {
							dl = "now() + interval '" + offsets[deadline] + "'"
						}
						worker, lease := "NULL", "NULL"
						if status == task.StatusRunning {
							worker, lease = "'someone'", "gen_random_uuid()"
						}
						if _, err := tx.ExecContext(ctx, `
							INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts,
								worker_id, lease_id, deadline, run_at, created_at, updated_at, payload_bytes)
							VALUES ($1, 'hooks', $2, 0, '{}', $3, 0, 3, `+worker+`, `+lease+`, `+dl+`,
								now() + interval '`+offsets[runAt]+`', now() - interval '1 minute', now() - interval '1 minute', 2)`,
							uuid.Must(uuid.NewV7()), string(status), pq.StringArray(tags)); err != nil {
							return err
						}
					}
				}
			}
		}
		var ids []uuid.UUID
		if err := tx.SelectContext(ctx, &ids, `SELECT id FROM tasks WHERE queue = 'hooks' ORDER BY id`); err != nil {
			return err
		}
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT now()`); err != nil {
			return err
		}
		before := make([]*task.Task, len(ids))
		for i, id := range ids {
			var err error
			if before[i], err = st.Tasks.Get(ctx, id); err != nil {
				return err
			}
		}
		claimed, _, err := st.Tasks.Claim(ctx, ports.ClaimParams{WorkerID: "push:w", Queues: []string{"hooks"},
			Limit: 1000, LeaseSeconds: 120, Push: true})
		if err != nil {
			return err
		}
		got := map[uuid.UUID]*task.Task{}
		for _, c := range claimed {
			got[c.ID()] = c
		}
		accepted := 0
		for _, pre := range before {
			want := pre.Deliverable(now)
			c, ok := got[pre.ID()]
			require.Equal(t, want, ok, "task %+v: Deliverable says %v", pre.Snapshot(), want)
			if !ok {
				continue
			}
			accepted++
			_, err := pre.Claim(task.ClaimParams{WorkerID: "push:w", WorkerTags: pre.Snapshot().Tags, LeaseID: c.Snapshot().LeaseID,
				LeaseSeconds: 120}, now)
			require.NoError(t, err)
			require.Equal(t, pre.Snapshot(), c.Snapshot(), "the statement leaves the task as task.Claim does")
		}
		require.Equal(t, accepted, len(claimed))
		require.Positive(t, accepted)
		return nil
	})
	require.NoError(t, err)
}
