package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
)

// UniqueActiveIndex is the partial unique index that keeps a unique key to
// one unfinished task per queue (migrations/0010). Its predicate lists
// task.UnfinishedStatuses; a test compares the two.
const UniqueActiveIndex = "tasks_unique_active"

// unfinishedSQL is task.UnfinishedStatuses as an SQL list, exactly as the
// predicate of UniqueActiveIndex spells it, so that the planner can prove
// a look-up implies the predicate and use the index.
var unfinishedSQL = func() string {
	quoted := make([]string, len(task.UnfinishedStatuses))
	for i, s := range task.UnfinishedStatuses {
		quoted[i] = pq.QuoteLiteral(string(s))
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}()

// existingSQL finds, for each submission (queue, idempotency key, unique
// key, schedule name and tick; NULL for none), the task that keeps it from
// being inserted: the tick's task (tasks_schedule_tick), else the queue's
// task with its idempotency key, else the queue's unfinished task with its
// unique key. Each row carries its submission's ordinal (k.i).
var existingSQL = `
	SELECT k.i, ` + prefixed("e.", taskColumns) + `
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[])
		WITH ORDINALITY AS k(queue, ikey, ukey, sname, stick, i)
	JOIN LATERAL (
		(SELECT ` + taskColumns + `, 0 AS preference FROM tasks
			WHERE k.sname IS NOT NULL AND schedule_name = k.sname AND schedule_tick = k.stick)
		UNION ALL
		(SELECT ` + taskColumns + `, 1 FROM tasks
			WHERE k.ikey IS NOT NULL AND queue = k.queue AND idempotency_key = k.ikey)
		UNION ALL
		(SELECT ` + taskColumns + `, 2 FROM tasks
			WHERE k.ukey IS NOT NULL AND queue = k.queue AND unique_key = k.ukey AND status IN ` + unfinishedSQL + `)
		ORDER BY preference LIMIT 1
	) e ON true`

// existing returns, for each of ts (in order), the stored task that its
// idempotency key or unique key names (see existingSQL), or nil.
func (s *TaskStore) existing(ctx context.Context, ts []*task.Task) ([]*task.Task, error) {
	queues := make(pq.StringArray, len(ts))
	ikeys := make(nullTexts, len(ts))
	ukeys := make(nullTexts, len(ts))
	snames := make(nullTexts, len(ts))
	sticks := make(nullTexts, len(ts))
	for i, t := range ts {
		v := t.Snapshot()
		queues[i], ikeys[i], ukeys[i] = v.Queue, nullString(v.IdempotencyKey), nullString(v.UniqueKey)
		if v.ScheduleTick != nil {
			snames[i], sticks[i] = nullString(v.ScheduleName), nullTimeText(v.ScheduleTick)
		}
	}
	var rows []struct {
		I int `db:"i"`
		taskRow
	}
	if err := s.st.tx.SelectContext(ctx, &rows, existingSQL, queues, ikeys, ukeys, snames, sticks); err != nil {
		return nil, fmt.Errorf("load tasks by idempotency or unique key: %w", err)
	}
	out := make([]*task.Task, len(ts))
	for i := range rows {
		out[rows[i].I-1] = rows[i].toDomain()
	}
	return out, nil
}

// uniqueKeyConflict translates a unique violation of UniqueActiveIndex by
// a save of v into a *task.UniqueKeyError.
func uniqueKeyConflict(err error, v task.Snapshot) error {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" && pqErr.Constraint == UniqueActiveIndex {
		return &task.UniqueKeyError{ID: v.ID, Queue: v.Queue, Key: v.UniqueKey}
	}
	return fmt.Errorf("save task: %w", err)
}

// retryColumns are a task's own retry policy as stored (all NULL: none).
type retryColumns struct {
	Base   sql.NullFloat64 `db:"retry_base_seconds"`
	Max    sql.NullFloat64 `db:"retry_max_seconds"`
	Jitter sql.NullString  `db:"retry_jitter"`
}

func retryColumnsOf(p *backoff.Policy) retryColumns {
	if p == nil {
		return retryColumns{}
	}
	jitter := p.Jitter
	if jitter == "" {
		jitter = backoff.JitterNone
	}
	return retryColumns{
		Base:   sql.NullFloat64{Float64: p.Base.Seconds(), Valid: true},
		Max:    sql.NullFloat64{Float64: p.Cap.Seconds(), Valid: true},
		Jitter: sql.NullString{String: string(jitter), Valid: true},
	}
}

func (r retryColumns) policy() *backoff.Policy {
	if !r.Base.Valid || !r.Max.Valid || !r.Jitter.Valid {
		return nil
	}
	return &backoff.Policy{Base: microseconds(r.Base.Float64), Cap: microseconds(r.Max.Float64), Jitter: backoff.Jitter(r.Jitter.String)}
}

// microseconds converts stored seconds to a duration, to the microsecond.
func microseconds(s float64) time.Duration {
	return (time.Duration(s*1e6+0.5) * time.Microsecond)
}
