package postgres

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// The hot statements (claims, batch inserts, batch reports) return many task
// rows of 46 columns. sqlx maps each row onto taskRow by reflection, walking
// the struct's fields per row (a sixth of the CPU of scanning, the rest is
// lib/pq's decoding and database/sql's conversions). selectRows maps the
// columns once per statement through a table of the rows' fields instead.
// taskRowFields must name every db tag of taskRow
// (TestRowFieldsMatchTheDBTags checks it against the tags sqlx reads).

// rowFields maps a column name to the field of an R that scans it.
type rowFields[R any] map[string]func(r *R) any

// withFields is fields and, for a row type O that embeds an I (get), in's.
func withFields[O, I any](in rowFields[I], get func(o *O) *I, fields rowFields[O]) rowFields[O] {
	out := make(rowFields[O], len(in)+len(fields))
	for name, f := range in {
		out[name] = func(o *O) any { return f(get(o)) }
	}
	for name, f := range fields {
		out[name] = f
	}
	return out
}

// selectRows runs query and scans every row into an R, by column name as
// sqlx's Select does (a column without a field is an error).
func selectRows[R any](ctx context.Context, q sqlx.QueryerContext, fields rowFields[R], query string, args ...any) ([]R, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	dests := make([]func(*R) any, len(cols))
	for i, c := range cols {
		if dests[i] = fields[c]; dests[i] == nil {
			return nil, fmt.Errorf("scan: no destination for column %q", c)
		}
	}
	var out []R
	ptrs := make([]any, len(cols))
	for rows.Next() {
		var zero R
		out = append(out, zero)
		r := &out[len(out)-1]
		for i, d := range dests {
			ptrs[i] = d(r)
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// taskRowFields are taskRow's columns.
var taskRowFields = rowFields[taskRow]{
	"id":                  func(r *taskRow) any { return &r.ID },
	"seq":                 func(r *taskRow) any { return &r.Seq },
	"queue":               func(r *taskRow) any { return &r.Queue },
	"status":              func(r *taskRow) any { return &r.Status },
	"priority":            func(r *taskRow) any { return &r.Priority },
	"payload":             func(r *taskRow) any { return &r.Payload },
	"tags":                func(r *taskRow) any { return &r.Tags },
	"attempts":            func(r *taskRow) any { return &r.Attempts },
	"max_attempts":        func(r *taskRow) any { return &r.MaxAttempts },
	"worker_id":           func(r *taskRow) any { return &r.WorkerID },
	"lease_id":            func(r *taskRow) any { return &r.LeaseID },
	"last_error":          func(r *taskRow) any { return &r.LastError },
	"dead_reason":         func(r *taskRow) any { return &r.DeadReason },
	"result":              func(r *taskRow) any { return &r.Result },
	"deadline":            func(r *taskRow) any { return &r.Deadline },
	"run_at":              func(r *taskRow) any { return &r.RunAt },
	"idempotency_key":     func(r *taskRow) any { return &r.IdempotencyKey },
	"created_at":          func(r *taskRow) any { return &r.CreatedAt },
	"claimed_at":          func(r *taskRow) any { return &r.ClaimedAt },
	"finished_at":         func(r *taskRow) any { return &r.FinishedAt },
	"updated_at":          func(r *taskRow) any { return &r.UpdatedAt },
	"lease_seconds":       func(r *taskRow) any { return &r.LeaseSeconds },
	"lease_expires_at":    func(r *taskRow) any { return &r.LeaseExpiresAt },
	"cancel_requested_at": func(r *taskRow) any { return &r.CancelReqAt },
	"claim_request_id":    func(r *taskRow) any { return &r.ClaimRequestID },
	"unique_key":          func(r *taskRow) any { return &r.UniqueKey },
	"snoozes":             func(r *taskRow) any { return &r.Snoozes },
	"retry_base_seconds":  func(r *taskRow) any { return &r.retryColumns.Base },
	"retry_max_seconds":   func(r *taskRow) any { return &r.retryColumns.Max },
	"retry_jitter":        func(r *taskRow) any { return &r.retryColumns.Jitter },
	"blockers":            func(r *taskRow) any { return &r.Blockers },
	"has_dependants":      func(r *taskRow) any { return &r.HasDependants },
	"group_key":           func(r *taskRow) any { return &r.GroupKey },
	"grank":               func(r *taskRow) any { return &r.Grank },
	"timeout_seconds":     func(r *taskRow) any { return &r.TimeoutSeconds },
	"timeout_at":          func(r *taskRow) any { return &r.TimeoutAt },
	"metadata":            func(r *taskRow) any { return &r.Metadata },
	"traceparent":         func(r *taskRow) any { return &r.Traceparent },
	"tracestate":          func(r *taskRow) any { return &r.Tracestate },
	"progress":            func(r *taskRow) any { return &r.Progress },
	"awaited":             func(r *taskRow) any { return &r.Awaited },
	"schedule_name":       func(r *taskRow) any { return &r.ScheduleName },
	"schedule_tick":       func(r *taskRow) any { return &r.ScheduleTick },
	"workflow_id":         func(r *taskRow) any { return &r.WorkflowID },
	"replay_of":           func(r *taskRow) any { return &r.ReplayOf },
	"debounce_until":      func(r *taskRow) any { return &r.DebounceUntil },
}

// taskRowNowFields are taskRowNow's columns.
var taskRowNowFields = withFields(taskRowFields, func(r *taskRowNow) *taskRow { return &r.taskRow }, rowFields[taskRowNow]{
	"db_now": func(r *taskRowNow) any { return &r.Now },
})

// completedRowFields are completedRow's columns.
var completedRowFields = withFields(taskRowNowFields, func(r *completedRow) *taskRowNow { return &r.taskRowNow }, rowFields[completedRow]{
	"completed": func(r *completedRow) any { return &r.Completed },
})

// claimedRowFields are claimedRow's columns.
var claimedRowFields = withFields(taskRowFields, func(r *claimedRow) *taskRow { return &r.taskRow }, rowFields[claimedRow]{
	"request": func(r *claimedRow) any { return &r.Request },
	"offered": func(r *claimedRow) any { return &r.Offered },
})

// workerRowFields are workerRow's columns.
var workerRowFields = rowFields[workerRow]{
	"id":                func(r *workerRow) any { return &r.ID },
	"queues":            func(r *workerRow) any { return &r.Queues },
	"tags":              func(r *workerRow) any { return &r.Tags },
	"status":            func(r *workerRow) any { return &r.Status },
	"registered_at":     func(r *workerRow) any { return &r.RegisteredAt },
	"last_heartbeat_at": func(r *workerRow) any { return &r.LastHeartbeatAt },
	"draining":          func(r *workerRow) any { return &r.Draining },
	"owner_key_id":      func(r *workerRow) any { return &r.OwnerKeyID },
}

// workerRowNowFields are workerRowNow's columns: every claim transaction
// reads its workers' rows (touchEach).
var workerRowNowFields = withFields(workerRowFields, func(r *workerRowNow) *workerRow { return &r.workerRow }, rowFields[workerRowNow]{
	"db_now": func(r *workerRowNow) any { return &r.Now },
})
