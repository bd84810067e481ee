package postgres_test

import (
	"context"
	"fmt"
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

// The claim statement encodes the domain's rule (claimEligible is
// task.Task.Claimable, claimAssign is task.Task.Claim): for tasks of every
// shape (status, run_at and deadline before, at and after the claim's now,
// tags against workers with and without tags), the statement claims exactly
// the tasks Claimable accepts, and leaves each exactly as Claim leaves it.
func TestClaimStatementAgreesWithTheDomain(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runner := postgres.NewTxRunner(db)
	offsets := map[string]string{"before": "-1 hour", "at": "0 seconds", "after": "1 hour"}
	tagSets := [][]string{{}, {"a"}, {"a", "b"}, {"c"}}
	workerTags := [][]string{{}, {"a"}, {"a", "b"}, {"b", "c", "a"}}
	statuses := []task.Status{task.StatusPending, task.StatusRunning, task.StatusDone, task.StatusDead}

	for wi, wt := range workerTags {
		queue := fmt.Sprintf("agree-%d", wi)
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
			claimed, _, err := st.Tasks.Claim(ctx, ports.ClaimParams{WorkerID: "w", WorkerTags: wt, Queues: []string{queue},
				Limit: 1000, LeaseSeconds: 120, RequestID: "r-1"})
			if err != nil {
				return err
			}
			got := map[uuid.UUID]*task.Task{}
			for _, c := range claimed {
				got[c.ID()] = c
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
				_, err := pre.Claim(task.ClaimParams{WorkerID: "w", WorkerTags: wt, LeaseID: c.Snapshot().LeaseID,
					LeaseSeconds: 120, RequestID: "r-1"}, now)
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
