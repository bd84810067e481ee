package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// completeShape is one kind of task a completion may meet.
type completeShape struct {
	status            task.Status
	worker            string // the holder ('w' reports)
	sameLease         bool   // the report names the holder's lease
	claimed           bool   // claimed_at set
	cancelRequested   bool
	awaited           bool
	hasDependants     bool
	extras            bool // last_error, progress, timeout_at, metadata, trace set
	result            string
	previouslyClaimed bool
}

// The completion statement (completeHeldSQL) encodes task.Task.Complete:
// for tasks of every shape (held by the reporter under its lease or not,
// every status, with or without a claim time, a cancel request, waiters,
// dependants, the columns of issue 23, with and without a result), twin
// tasks completed one through CompleteEach and one through the general
// path (UpdateEach: the domain decides, saveTasks and insertAttempts write)
// end up with the same rows, the same attempts, the same outcomes and the
// same events.
func TestCompleteStatementAgreesWithTheDomain(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	runner := postgres.NewTxRunner(db)
	var shapes []completeShape
	for _, st := range []task.Status{task.StatusPending, task.StatusDone, task.StatusDead, task.StatusBlocked} {
		shapes = append(shapes, completeShape{status: st})
	}
	for _, holder := range []string{"w", "x"} {
		for _, same := range []bool{true, false} {
			shapes = append(shapes, completeShape{status: task.StatusRunning, worker: holder, sameLease: same, claimed: true, result: `{"ok":true}`})
		}
	}
	for _, claimed := range []bool{true, false} {
		for _, flags := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
			for _, result := range []string{"", `{"n":[1,2.5,"x"]}`, `null`} {
				shapes = append(shapes, completeShape{status: task.StatusRunning, worker: "w", sameLease: true, claimed: claimed,
					cancelRequested: flags&1 != 0, awaited: flags&2 != 0, hasDependants: flags&4 != 0, extras: flags&4 != 0,
					result: result, previouslyClaimed: flags&1 != 0})
			}
		}
	}
	lease := uuid.New()
	type twin struct {
		shape completeShape
		a, b  uuid.UUID
	}
	twins := make([]twin, len(shapes))
	var viaStatement, viaDomain []ports.TaskResult
	err := runner.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		tx := postgres.TxOf(st)
		for i, s := range shapes {
			twins[i] = twin{shape: s, a: uuid.Must(uuid.NewV7()), b: uuid.Must(uuid.NewV7())}
			for _, id := range []uuid.UUID{twins[i].a, twins[i].b} {
				worker, leaseID, claimedAt, leaseEnd, secs := "NULL", "NULL", "NULL", "NULL", "NULL"
				if s.status == task.StatusRunning {
					worker, leaseID, leaseEnd, secs = "'"+s.worker+"'", "'"+lease.String()+"'", "now() + interval '1 minute'", "60"
					if s.claimed {
						claimedAt = "now() - interval '5 seconds'"
					}
				}
				cancel, extras := "NULL", "NULL, NULL, NULL, NULL, NULL"
				if s.cancelRequested {
					cancel = "now() - interval '1 second'"
				}
				if s.extras {
					extras = `'an earlier attempt failed', '{"percent": 40, "message": "half"}',
						now() + interval '1 hour', '{"team": "a"}', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'`
				}
				attempts := 1
				if s.previouslyClaimed {
					attempts = 2
				}
				blockers := "NULL"
				if s.status == task.StatusBlocked {
					blockers = "1"
				}
				_, err := tx.ExecContext(ctx, `
					INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts, worker_id, lease_id,
						run_at, created_at, updated_at, claimed_at, lease_seconds, lease_expires_at, cancel_requested_at,
						claim_request_id, payload_bytes, awaited, has_dependants, blockers,
						last_error, progress, timeout_at, metadata, traceparent)
					VALUES ($1, 'agree-complete', $2, 1, '{"p": 1}', '{}', $3, 5, `+worker+`, `+leaseID+`,
						now() - interval '1 minute', now() - interval '1 minute', now() - interval '1 minute', `+claimedAt+`,
						`+secs+`, `+leaseEnd+`, `+cancel+`, 'req-1', 8, $4, $5, `+blockers+`, `+extras+`)`,
					id, string(s.status), attempts, s.awaited, s.hasDependants)
				if err != nil {
					return fmt.Errorf("insert %+v: %w", s, err)
				}
			}
		}
		refs := make([]ports.CompleteRef, len(twins))
		ids := make([]uuid.UUID, len(twins))
		for i, tw := range twins {
			l := lease
			if !tw.shape.sameLease {
				l = uuid.New()
			}
			var result json.RawMessage
			if tw.shape.result != "" {
				result = json.RawMessage(tw.shape.result)
			}
			refs[i] = ports.CompleteRef{ID: tw.a, WorkerID: "w", LeaseID: l, Result: result}
			ids[i] = tw.b
		}
		complete := func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Complete(task.CompleteParams{WorkerID: "w", LeaseID: refs[i].LeaseID, Result: refs[i].Result}, now)
			return []event.Event{e}, err
		}
		var err error
		if viaStatement, err = st.Tasks.CompleteEach(ctx, refs, complete); err != nil {
			return err
		}
		viaDomain, err = st.Tasks.UpdateEach(ctx, ids, complete)
		return err
	})
	require.NoError(t, err)

	rowOf := func(table, key string, id uuid.UUID) []map[string]any {
		var raw []byte
		require.NoError(t, db.Get(&raw, `SELECT coalesce(json_agg(to_jsonb(r) - 'id' - 'seq' - 'task_id' - 'workflow_id' ORDER BY r.seq), '[]') FROM `+table+` r WHERE `+key+` = $1`, id))
		var out []map[string]any
		require.NoError(t, json.Unmarshal(raw, &out))
		return out
	}
	eventsOf := func(id uuid.UUID) []map[string]any {
		var raw []byte
		require.NoError(t, db.Get(&raw, `
			SELECT coalesce(json_agg(e - 'task_id'), '[]') FROM watermill_taskmaster_events m, jsonb_array_elements(m.payload::jsonb->'events') e
			WHERE e->>'task_id' = $1`, id.String()))
		var out []map[string]any
		require.NoError(t, json.Unmarshal(raw, &out))
		return out
	}
	completed := 0
	for i, tw := range twins {
		a, b := viaStatement[i], viaDomain[i]
		require.Equal(t, errKind(b.Err), errKind(a.Err), "shape %+v", tw.shape)
		if a.Err == nil {
			completed++
			sa, sb := a.Task.Snapshot(), b.Task.Snapshot()
			// Each twin is its own run: its workflow id is its own id.
			require.Equal(t, sa.ID, sa.WorkflowID, "shape %+v", tw.shape)
			require.Equal(t, sb.ID, sb.WorkflowID, "shape %+v", tw.shape)
			sa.ID, sb.ID = uuid.Nil, uuid.Nil
			sa.WorkflowID, sb.WorkflowID = uuid.Nil, uuid.Nil
			require.Equal(t, sb, sa, "shape %+v: the task as answered", tw.shape)
		}
		require.Equal(t, rowOf("tasks", "id", tw.b), rowOf("tasks", "id", tw.a), "shape %+v: the stored task", tw.shape)
		require.Equal(t, rowOf("task_attempts", "task_id", tw.b), rowOf("task_attempts", "task_id", tw.a), "shape %+v: the attempts", tw.shape)
		require.Equal(t, eventsOf(tw.b), eventsOf(tw.a), "shape %+v: the events", tw.shape)
	}
	require.Equal(t, 1+2*8*3, completed, "the held ones are completed, the others refused")
}

// errKind is an error's type and, for the domain's typed errors, their
// fields but the task id.
func errKind(err error) string {
	switch e := err.(type) {
	case nil:
		return "nil"
	case *task.TransitionError:
		return fmt.Sprintf("transition %s -> %s", e.From, e.To)
	case *task.LeaseError:
		return fmt.Sprintf("lease %s", e.Status)
	default:
		return reflect.TypeOf(err).String() + ": " + err.Error()
	}
}
