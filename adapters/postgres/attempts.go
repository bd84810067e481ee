package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/task"
)

// saved does what every save of tasks that the domain moved must also do,
// in the same transaction: it writes the attempts their transitions ended
// (task.Task.EndedAttempt; one statement for all of them), queues the
// tasks that ended DONE or DEAD and have dependants, whose ends
// settleDependants passes on before the transaction commits, and those that
// ended awaited, whose ends the commit announces (sendNotifications), and
// writes the progress of the tasks whose progress changed (saveProgress).
// Every
// statement that saves transitioned tasks calls it (save, saveTasks, the
// dependants' own save); a new one must too, or, when it writes the ended
// attempts itself (completeHeldSQL), noteFinished.
func (s *txState) saved(ctx context.Context, ts ...*task.Task) error {
	var attempts []task.Attempt
	for _, t := range ts {
		if a, ok := t.EndedAttempt(); ok {
			attempts = append(attempts, a)
		}
	}
	s.noteFinished(ts)
	if err := saveProgress(ctx, s, ts); err != nil {
		return err
	}
	return insertAttempts(ctx, s, attempts)
}

// noteFinished queues, of ts (tasks this transaction saved), those it moved
// into DONE or DEAD that have dependants (settleDependants) or waiters
// (awaitedEnds).
func (s *txState) noteFinished(ts []*task.Task) {
	for _, t := range ts {
		if t.Finished() && t.HasDependants() {
			s.finished = append(s.finished, t)
		}
		if t.Finished() && t.Awaited() {
			s.awaitedEnds = append(s.awaitedEnds, t.ID())
		}
	}
}

// insertAttemptsSQL writes ended attempts from parallel arrays.
const insertAttemptsSQL = `
	INSERT INTO task_attempts (task_id, attempt, worker_id, claimed_at, finished_at, outcome, error, http_status)
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::text[],
		$8::smallint[])`

func insertAttempts(ctx context.Context, st *txState, as []task.Attempt) error {
	if len(as) == 0 {
		return nil
	}
	n := len(as)
	var (
		ids      = make(pq.StringArray, n)
		numbers  = make(pq.Int64Array, n)
		workers  = make(pq.StringArray, n)
		claimed  = make(pq.StringArray, n)
		finished = make(pq.StringArray, n)
		outcomes = make(pq.StringArray, n)
		errs     = make([]sql.NullString, n)
		statuses = make(nullInts, n)
	)
	for i, a := range as {
		ids[i], numbers[i], workers[i], claimed[i], outcomes[i] = a.TaskID.String(), int64(a.Number), a.WorkerID, timeText(a.ClaimedAt), string(a.Outcome)
		if a.FinishedAt == nil {
			return fmt.Errorf("save attempt %d of task %s: it has not ended", a.Number, a.TaskID)
		}
		finished[i] = timeText(*a.FinishedAt)
		errs[i] = nullString(a.Error)
		statuses[i] = nullInt(a.HTTPStatus)
	}
	if _, err := st.tx.ExecContext(ctx, insertAttemptsSQL, ids, numbers, workers,
		claimed, finished, outcomes, nullTexts(errs), statuses); err != nil {
		return fmt.Errorf("save attempts: %w", err)
	}
	return nil
}

// attemptRow is one row of task_attempts.
type attemptRow struct {
	TaskID     uuid.UUID      `db:"task_id"`
	Attempt    int            `db:"attempt"`
	WorkerID   string         `db:"worker_id"`
	ClaimedAt  time.Time      `db:"claimed_at"`
	FinishedAt time.Time      `db:"finished_at"`
	Outcome    string         `db:"outcome"`
	Error      sql.NullString `db:"error"`
	HTTPStatus sql.NullInt64  `db:"http_status"`
}

// Attempts implements ports.TaskStore.
func (s *TaskStore) Attempts(ctx context.Context, id uuid.UUID) ([]task.Attempt, error) {
	var rows []attemptRow
	if err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT task_id, attempt, worker_id, claimed_at, finished_at, outcome, error, http_status
		FROM task_attempts WHERE task_id = $1 ORDER BY seq`, id); err != nil {
		return nil, fmt.Errorf("select attempts: %w", err)
	}
	out := make([]task.Attempt, len(rows))
	for i, r := range rows {
		out[i] = task.Attempt{
			TaskID: r.TaskID, Number: r.Attempt, WorkerID: r.WorkerID, ClaimedAt: r.ClaimedAt,
			FinishedAt: &rows[i].FinishedAt, Outcome: task.Outcome(r.Outcome), Error: r.Error.String,
			HTTPStatus: int(r.HTTPStatus.Int64),
		}
	}
	return out, nil
}
