package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/ports"
)

// The queue listing (GET /queues/v1) at scale: a node may hold 100,000
// queues, so a page costs O(page), not O(queues), wherever the filter
// allows it. A page is read in two steps, in one read-only snapshot:
//
//  1. the page's names: the first Limit+1 names after the cursor (keyset by
//     name) of the union of the queues that hold tasks (queue_status_counts,
//     in its primary key's order, grouped per queue and stopped by the
//     LIMIT) and of the queues that have settings (queue_settings);
//  2. for those names only: the counts, settings, oldest PENDING task (a
//     loose index scan of tasks_claim per queue), the ACTIVE workers (one
//     pass over the active workers), the totals and the rate buckets.
//
// Filters on the name (prefix, pattern) become LIKE conditions that an
// index range serves when the pattern starts with a literal and the
// database collation is C; min_pending and paused=false filter the grouped
// counts as they are scanned, so a selective filter may scan the counts of
// many queues to fill a page (measured in docs/performance.md); paused=true
// walks the index of paused queues.

// LeasedSampleSize is the most RUNNING tasks QueueDetail.LeasedSample shows.
const LeasedSampleSize = 20

// readQueueSnapshot runs fn in a read-only repeatable-read transaction whose
// statements are planned for their parameters (custom plans: a LIKE prefix
// only narrows an index scan when the planner sees its value) and never
// JIT-compiled: the planner overestimates the per-queue probes of a page
// (queuePageSQL) enough to compile it, which took 380 ms of a 420 ms page
// of 1,000 queues.
func (r *StatsReader) readQueueSnapshot(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := r.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("queue statistics: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL jit = off`); err != nil {
		return fmt.Errorf("queue statistics: %w", err)
	}
	return fn(tx)
}

// Queues implements ports.StatsReader. Connection failures come back marked
// with ports.ErrUnavailable.
func (r *StatsReader) Queues(ctx context.Context, f ports.QueueFilter) (ports.QueuePage, error) {
	var page ports.QueuePage
	err := r.readQueueSnapshot(ctx, func(tx *sqlx.Tx) error {
		var names []string
		if f.Names != nil {
			// The caller's page: the named queues that exist, in its order.
			if err := tx.SelectContext(ctx, &names, namedQueuesSQL, pq.StringArray(f.Names)); err != nil {
				return fmt.Errorf("queue names: %w", err)
			}
		} else {
			query, args := queueNamesQuery(f)
			if err := tx.SelectContext(ctx, &names, query, args...); err != nil {
				return fmt.Errorf("queue names: %w", err)
			}
			if len(names) > f.Limit {
				names, page.More = names[:f.Limit], true
			}
		}
		var err error
		page.Queues, err = readQueueStats(ctx, tx, names, !f.CountsOnly)
		return err
	})
	return page, postgres.TranslateError(err)
}

// namedQueuesSQL keeps, of the queues $1 in their order, those that hold
// tasks or have settings (the queues a listing shows), each found by a
// primary key.
const namedQueuesSQL = `
	SELECT n.queue FROM unnest($1::text[]) WITH ORDINALITY AS n(queue, i)
	WHERE EXISTS (SELECT 1 FROM queue_status_counts c WHERE c.queue = n.queue AND c.count <> 0)
		OR EXISTS (SELECT 1 FROM queue_settings s WHERE s.queue = n.queue)
	ORDER BY n.i`

// Queue implements ports.StatsReader.
func (r *StatsReader) Queue(ctx context.Context, name string) (*ports.QueueDetail, error) {
	var out *ports.QueueDetail
	err := r.readQueueSnapshot(ctx, func(tx *sqlx.Tx) error {
		// A queue exists when the statistics count tasks in it, it has
		// settings, or (ahead of the projection) it holds a PENDING or
		// RUNNING task, each found with an index.
		var exists bool
		if err := tx.GetContext(ctx, &exists, `
			SELECT EXISTS (SELECT 1 FROM queue_status_counts WHERE queue = $1 AND count <> 0)
				OR EXISTS (SELECT 1 FROM queue_settings WHERE queue = $1)
				OR EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status = 'PENDING')
				OR EXISTS (SELECT 1 FROM tasks WHERE queue = $1 AND status = 'RUNNING')`, name); err != nil {
			return fmt.Errorf("queue detail: %w", err)
		}
		if !exists {
			return queue.ErrNotFound
		}
		stats, err := readQueueStats(ctx, tx, []string{name}, true)
		if err != nil {
			return err
		}
		out = &ports.QueueDetail{QueueStats: stats[0], LeasedSample: []ports.LeasedTask{}}
		if err := tx.GetContext(ctx, &out.Leased, `
			SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'RUNNING'`, name); err != nil {
			return fmt.Errorf("queue detail: leased: %w", err)
		}
		var sample []struct {
			ID             string          `db:"id"`
			WorkerID       string          `db:"worker_id"`
			ClaimedAt      time.Time       `db:"claimed_at"`
			LeaseExpiresAt time.Time       `db:"lease_expires_at"`
			Percent        sql.NullFloat64 `db:"percent"`
			Message        sql.NullString  `db:"message"`
		}
		if err := tx.SelectContext(ctx, &sample, `
			SELECT id, worker_id, claimed_at, lease_expires_at,
				(progress->>'percent')::float8 AS percent, progress->>'message' AS message FROM tasks
			WHERE queue = $1 AND status = 'RUNNING'
			ORDER BY claimed_at, id LIMIT $2`, name, LeasedSampleSize); err != nil {
			return fmt.Errorf("queue detail: leased sample: %w", err)
		}
		for _, s := range sample {
			t := ports.LeasedTask{WorkerID: s.WorkerID, ClaimedAt: s.ClaimedAt, LeaseExpiresAt: s.LeaseExpiresAt,
				ProgressMessage: s.Message.String}
			if s.Percent.Valid {
				p := s.Percent.Float64
				t.ProgressPercent = &p
			}
			if err := t.ID.UnmarshalText([]byte(s.ID)); err != nil {
				return fmt.Errorf("queue detail: leased sample: %w", err)
			}
			out.LeasedSample = append(out.LeasedSample, t)
		}
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT now()`); err != nil {
			return fmt.Errorf("queue detail: %w", err)
		}
		buckets, err := readBuckets(ctx, tx, []string{name}, now)
		if err != nil {
			return err
		}
		out.Averages = averageWindows(buckets[name], now)
		if out.Settings.Push != nil {
			if out.Deliveries, err = postgres.ReadDeliverySummary(ctx, tx, name); err != nil {
				return fmt.Errorf("queue detail: %w", err)
			}
		}
		return nil
	})
	if errors.Is(err, queue.ErrNotFound) {
		return nil, err
	}
	return out, postgres.TranslateError(err)
}

// queueNamesQuery builds the statement of a page's names: the first
// f.Limit+1 queue names after f.After that hold tasks or have settings and
// pass the filters.
func queueNamesQuery(f ports.QueueFilter) (string, []any) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	// Conditions on the name, shared by both sources (each names its
	// column "queue").
	names := queueNameConds(f, arg)
	minPending := int64(0)
	if f.MinPending != nil {
		minPending = *f.MinPending
	}
	limit := arg(f.Limit + 1)

	var sources []string
	// Queues that hold tasks. A paused queue has settings, so the settings
	// source alone serves paused=true.
	if f.Paused == nil || !*f.Paused {
		having := []string{"bool_or(count <> 0)"}
		if minPending > 0 {
			having = append(having, "coalesce(sum(count) FILTER (WHERE status = 'PENDING'), 0) >= "+arg(minPending))
		}
		if f.Paused != nil {
			having = append(having, "NOT EXISTS (SELECT 1 FROM queue_settings s WHERE s.queue = c.queue AND s.paused)")
		}
		sources = append(sources, "(SELECT queue FROM queue_status_counts c"+where(names)+
			" GROUP BY queue HAVING "+strings.Join(having, " AND ")+" ORDER BY queue LIMIT "+limit+")")
	}
	// Queues that have settings.
	conds := append([]string(nil), names...)
	if f.Paused != nil {
		if *f.Paused {
			conds = append(conds, "paused")
		} else {
			conds = append(conds, "NOT paused")
		}
	}
	if minPending > 0 {
		conds = append(conds, "(SELECT coalesce(sum(c.count), 0) FROM queue_status_counts c WHERE c.queue = s.queue AND c.status = 'PENDING') >= "+
			arg(minPending))
	}
	sources = append(sources, "(SELECT queue FROM queue_settings s"+where(conds)+" ORDER BY queue LIMIT "+limit+")")
	return "SELECT queue FROM (" + strings.Join(sources, " UNION ") + ") u ORDER BY queue LIMIT " + limit, args
}

// queueNameConds are the conditions of f on a column "queue" (cursor,
// prefix, pattern, a key's queues), with their values added by arg.
func queueNameConds(f ports.QueueFilter, arg func(any) string) []string {
	var conds []string
	if f.After != "" {
		conds = append(conds, "queue > "+arg(f.After))
	}
	if f.Prefix != "" {
		conds = append(conds, "queue LIKE "+arg(escapeLike(f.Prefix)+"%")+` ESCAPE '\'`)
	}
	if f.Pattern != "" {
		conds = append(conds, "queue LIKE "+arg(GlobToLike(f.Pattern))+` ESCAPE '\'`)
	}
	if f.Visible != nil {
		exact, prefixes := postgres.QueuePatterns(f.Visible)
		conds = append(conds, "(queue = ANY("+arg(exact)+"::text[]) OR EXISTS (SELECT 1 FROM unnest("+arg(prefixes)+
			"::text[]) AS p(prefix) WHERE starts_with(queue, p.prefix)))")
	}
	return conds
}

func where(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// escapeLike escapes the LIKE wildcards (and the escape character) of s.
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// GlobToLike translates a queue name glob (* any run of characters, ? one
// character, anything else itself) into a LIKE pattern with escape
// character \: a "_" or "%" of the glob matches only itself.
func GlobToLike(glob string) string {
	var b strings.Builder
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteByte('%')
		case '?':
			b.WriteByte('_')
		case '\\', '%', '_':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// queuePageSQL reads, for the names $1 in their order, the projected counts,
// the settings and the age of the oldest PENDING task. The latter walks the
// claim index (queue, priority DESC, grank, seq) WHERE PENDING: one probe
// for the first row of each distinct priority (a loose index scan), the
// head of each priority in claim order (a new task never ranks before the
// head of its queue, so within a priority that head is the oldest task).
var queuePageSQL = `
SELECT n.queue, c.pending, c.running, c.done, c.dead, c.blocked,
	` + postgres.QueueSettingsScanColumns("s") + `,
	extract(epoch FROM now() - o.oldest)::float8 AS oldest_pending_age
FROM unnest($1::text[]) WITH ORDINALITY AS n(queue, i)
CROSS JOIN LATERAL (
	SELECT coalesce(sum(count) FILTER (WHERE status = 'PENDING'), 0) AS pending,
		coalesce(sum(count) FILTER (WHERE status = 'RUNNING'), 0) AS running,
		coalesce(sum(count) FILTER (WHERE status = 'DONE'), 0) AS done,
		coalesce(sum(count) FILTER (WHERE status = 'DEAD'), 0) AS dead,
		coalesce(sum(count) FILTER (WHERE status = 'BLOCKED'), 0) AS blocked
	FROM queue_status_counts c WHERE c.queue = n.queue
) c
LEFT JOIN queue_settings s ON s.queue = n.queue
LEFT JOIN LATERAL (
	WITH RECURSIVE prio AS (
		(SELECT t.priority FROM tasks t
		 WHERE t.status = 'PENDING' AND t.queue = n.queue
		 ORDER BY t.priority DESC LIMIT 1)
		UNION ALL
		SELECT (SELECT t.priority FROM tasks t
		        WHERE t.status = 'PENDING' AND t.queue = n.queue AND t.priority < p.priority
		        ORDER BY t.priority DESC LIMIT 1)
		FROM prio p WHERE p.priority IS NOT NULL
	)
	SELECT min((SELECT t.created_at FROM tasks t
	            WHERE t.status = 'PENDING' AND t.queue = n.queue AND t.priority = p.priority
	            ORDER BY t.grank, t.seq LIMIT 1)) AS oldest
	FROM prio p WHERE p.priority IS NOT NULL
) o ON c.pending > 0
ORDER BY n.i`

// activeWorkersSQL counts, for each of the names $1, the ACTIVE workers
// registered for it, in one pass over the active workers; the row with a
// NULL queue counts those registered for every queue.
const activeWorkersSQL = `
SELECT q.queue, count(*) AS workers
FROM workers w
LEFT JOIN LATERAL unnest(w.queues) AS q(queue) ON true
WHERE w.status = 'ACTIVE' AND (q.queue IS NULL OR q.queue = ANY($1::text[]))
GROUP BY q.queue`

// readQueueStats reads the statistics of the queues names, in that order,
// with their totals and rates when withRates.
func readQueueStats(ctx context.Context, tx *sqlx.Tx, names []string, withRates bool) ([]ports.QueueStats, error) {
	out := make([]ports.QueueStats, 0, len(names))
	if len(names) == 0 {
		return out, nil
	}
	var rows []struct {
		Queue   string `db:"queue"`
		Pending int64  `db:"pending"`
		Running int64  `db:"running"`
		Done    int64  `db:"done"`
		Dead    int64  `db:"dead"`
		Blocked int64  `db:"blocked"`
		postgres.QueueSettingsScan
		OldestPendingAge sql.NullFloat64 `db:"oldest_pending_age"`
	}
	if err := tx.SelectContext(ctx, &rows, queuePageSQL, pq.StringArray(names)); err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	var workerRows []struct {
		Queue   sql.NullString `db:"queue"`
		Workers int64          `db:"workers"`
	}
	if err := tx.SelectContext(ctx, &workerRows, activeWorkersSQL, pq.StringArray(names)); err != nil {
		return nil, fmt.Errorf("queue statistics: workers: %w", err)
	}
	var anyQueue int64
	workers := map[string]int64{}
	for _, w := range workerRows {
		if w.Queue.Valid {
			workers[w.Queue.String] = w.Workers
		} else {
			anyQueue = w.Workers
		}
	}
	var meta struct {
		Now       time.Time    `db:"now"`
		AppliedAt sql.NullTime `db:"applied_at"`
	}
	if err := tx.GetContext(ctx, &meta, `
		SELECT now() AS now, (SELECT applied_at FROM projector_positions WHERE projection = $1) AS applied_at`,
		QueueStatsProjection); err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	var (
		totals  map[string]ports.QueueTotals
		buckets map[string][]rateBucket
		err     error
	)
	if withRates {
		if totals, err = readTotals(ctx, tx, names); err != nil {
			return nil, err
		}
		if buckets, err = readBuckets(ctx, tx, names, meta.Now); err != nil {
			return nil, err
		}
	}
	for _, c := range rows {
		q := ports.QueueStats{
			Queue: c.Queue, Pending: c.Pending, Running: c.Running, Done: c.Done, Dead: c.Dead, Blocked: c.Blocked,
			ActiveWorkers: anyQueue + workers[c.Queue], Totals: totals[c.Queue], Rates: rateWindows(buckets[c.Queue], meta.Now),
			StatsAsOf: timePtr(meta.AppliedAt), Settings: c.QueueSettingsScan.Settings(),
		}
		if c.OldestPendingAge.Valid {
			age := time.Duration(max(c.OldestPendingAge.Float64, 0) * float64(time.Second))
			q.OldestPendingAge = &age
		}
		out = append(out, q)
	}
	return out, nil
}
