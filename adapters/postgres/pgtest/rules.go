package pgtest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
)

// The rules below were CHECK constraints and a foreign key of tasks and task_attempts until
// migration 0023 dropped them (PostgreSQL prepares a table's checks again for every statement
// that writes it, a cost on every claim and report). The service's statements must still keep
// them: every test database is checked when its test ends, so a statement that breaks one
// fails the test that ran it.
const taskRulesSQL = `
	SELECT 'task ' || id || ': ' || rule FROM (
		SELECT id, CASE
			WHEN status <> ALL ($1::text[]) THEN 'status ' || quote_literal(status)
			WHEN max_attempts NOT BETWEEN 1 AND $2 THEN 'max_attempts ' || max_attempts
			WHEN char_length(group_key) NOT BETWEEN 1 AND $3 THEN 'group_key of ' || char_length(group_key) || ' characters'
			WHEN (retry_base_seconds IS NULL) <> (retry_max_seconds IS NULL)
				OR (retry_base_seconds IS NULL) <> (retry_jitter IS NULL)
				OR retry_jitter <> ALL ($4::text[]) THEN 'retry policy partly set or jitter ' || quote_nullable(retry_jitter)
			WHEN (schedule_name IS NULL) <> (schedule_tick IS NULL) THEN 'schedule name without tick, or tick without name'
		END AS rule
		FROM tasks
	) t WHERE rule IS NOT NULL
	UNION ALL
	SELECT 'attempt ' || a.task_id || '/' || a.seq || ': ' || rule FROM (
		SELECT task_id, seq, CASE
			WHEN outcome <> ALL ($5::text[]) THEN 'outcome ' || quote_literal(outcome)
			WHEN http_status NOT BETWEEN 100 AND 599 THEN 'http_status ' || http_status
			WHEN NOT EXISTS (SELECT 1 FROM tasks WHERE id = task_id) THEN 'its task does not exist'
		END AS rule
		FROM task_attempts
	) a WHERE rule IS NOT NULL
	LIMIT 20`

// TaskRuleViolations lists (up to 20) rows of db's tasks and task_attempts that break a rule
// of taskRulesSQL, one line each.
func TaskRuleViolations(ctx context.Context, db *sql.DB) ([]string, error) {
	statuses := make(pq.StringArray, len(task.Statuses))
	for i, s := range task.Statuses {
		statuses[i] = string(s)
	}
	outcomes := make(pq.StringArray, len(task.Outcomes))
	for i, o := range task.Outcomes {
		outcomes[i] = string(o)
	}
	jitters := pq.StringArray{string(backoff.JitterNone), string(backoff.JitterFull)}
	rows, err := db.QueryContext(ctx, taskRulesSQL, statuses, task.MaxMaxAttempts, task.MaxGroupKeyLength, jitters, outcomes)
	if err != nil {
		return nil, fmt.Errorf("check the task rules: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return nil, fmt.Errorf("check the task rules: %w", err)
		}
		out = append(out, line)
	}
	return out, rows.Err()
}
