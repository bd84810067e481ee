package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/ports"
)

// LimitStore implements ports.LimitStore over named_limits (migration
// 0021). The claims that take from a named limit lock its row FOR NO KEY
// UPDATE (task_claim_limits.go); a change locks it FOR UPDATE, so it waits
// for them and they for it.
type LimitStore struct {
	st *txState
}

var _ ports.LimitStore = (*LimitStore)(nil)

// limitRow is one row of named_limits, with what uses it.
type limitRow struct {
	Name       string          `db:"name"`
	PerSecond  sql.NullFloat64 `db:"rate_per_second"`
	Burst      sql.NullInt64   `db:"rate_burst"`
	MaxRunning sql.NullInt64   `db:"max_running"`
	Tokens     sql.NullFloat64 `db:"tokens"`
	TokensAt   sql.NullTime    `db:"tokens_at"`
	CreatedAt  time.Time       `db:"created_at"`
	UpdatedAt  time.Time       `db:"updated_at"`
	Queues     pq.StringArray  `db:"queues"`
	Running    int             `db:"running"`
	Now        time.Time       `db:"now"`
}

// limitSelectSQL reads named limits with the queues naming each (by name),
// their RUNNING tasks and the database time; %s is the WHERE clause (and
// locking) of the limits read.
const limitSelectSQL = `
	SELECT l.name, l.rate_per_second, l.rate_burst, l.max_running, l.tokens, l.tokens_at, l.created_at, l.updated_at,
		coalesce(u.queues, '{}') AS queues, coalesce(u.running, 0) AS running, now() AS now
	FROM (SELECT * FROM named_limits %s) l
	LEFT JOIN LATERAL (
		SELECT array_agg(s.queue ORDER BY s.queue) AS queues,
			sum((SELECT count(*) FROM tasks t WHERE t.queue = s.queue AND t.status = 'RUNNING'))::int AS running
		FROM queue_settings s WHERE s.limits @> ARRAY[l.name]
	) u ON true
	ORDER BY l.name`

func (r *limitRow) limit() queue.Limit {
	l := queue.Limit{Name: r.Name, RateLimit: rateLimit(r.PerSecond, r.Burst)}
	if r.MaxRunning.Valid {
		l.MaxRunning = intPtr(r.MaxRunning.Int64)
	}
	return l
}

func (r *limitRow) info() ports.LimitInfo {
	l := r.limit()
	info := ports.LimitInfo{Limit: l, Queues: append([]string{}, r.Queues...), Running: r.Running,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if l.RateLimit != nil {
		level := bucketOf(r.Tokens, r.TokensAt).Level(*l.RateLimit, r.Now)
		info.Tokens = &level
	}
	return info
}

// Put implements ports.LimitStore.
func (s *LimitStore) Put(ctx context.Context, name string, fn ports.LimitPutFunc) (ports.LimitInfo, bool, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return ports.LimitInfo{}, false, err
	}
	var before *queue.Limit
	var rows []limitRow
	if err := s.st.tx.SelectContext(ctx, &rows, fmt.Sprintf(limitSelectSQL, `WHERE name = $1 FOR UPDATE`), name); err != nil {
		return ports.LimitInfo{}, false, fmt.Errorf("lock named limit: %w", err)
	}
	if len(rows) > 0 {
		b := rows[0].limit()
		before = &b
	}
	after, events, err := fn(before, now)
	if err != nil {
		return ports.LimitInfo{}, false, err
	}
	perSecond, burst := nullRate(after.RateLimit)
	resetBucket := before == nil || queue.RateChanged(before.RateLimit, after.RateLimit)
	if _, err := s.st.tx.ExecContext(ctx, `
		INSERT INTO named_limits (name, rate_per_second, rate_burst, max_running, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $5)
		ON CONFLICT (name) DO UPDATE SET rate_per_second = $2, rate_burst = $3, max_running = $4, updated_at = $5,
			tokens = CASE WHEN $6 THEN NULL ELSE named_limits.tokens END,
			tokens_at = CASE WHEN $6 THEN NULL ELSE named_limits.tokens_at END`,
		name, perSecond, burst, nullIntPtr(after.MaxRunning), now, resetBucket); err != nil {
		return ports.LimitInfo{}, false, fmt.Errorf("save named limit: %w", err)
	}
	s.st.Record(events...)
	info, err := s.Get(ctx, name)
	if err != nil {
		return ports.LimitInfo{}, false, err
	}
	if before != nil && queue.LimitLoosens(*before, after) {
		for _, q := range info.Queues {
			s.st.notifyAll(q)
		}
	}
	return info, before == nil, nil
}

// Get implements ports.LimitStore.
func (s *LimitStore) Get(ctx context.Context, name string) (ports.LimitInfo, error) {
	var rows []limitRow
	if err := s.st.tx.SelectContext(ctx, &rows, fmt.Sprintf(limitSelectSQL, `WHERE name = $1`), name); err != nil {
		return ports.LimitInfo{}, fmt.Errorf("get named limit: %w", err)
	}
	if len(rows) == 0 {
		return ports.LimitInfo{}, queue.ErrLimitNotFound
	}
	return rows[0].info(), nil
}

// List implements ports.LimitStore.
func (s *LimitStore) List(ctx context.Context) ([]ports.LimitInfo, error) {
	var rows []limitRow
	if err := s.st.tx.SelectContext(ctx, &rows, fmt.Sprintf(limitSelectSQL, ``)); err != nil {
		return nil, fmt.Errorf("list named limits: %w", err)
	}
	out := make([]ports.LimitInfo, len(rows))
	for i := range rows {
		out[i] = rows[i].info()
	}
	return out, nil
}

// Delete implements ports.LimitStore. A change that names the limit holds
// its row FOR KEY SHARE until it commits (Missing): the lock here waits for
// it, and the look-up of the queues naming it, a statement after, sees it.
func (s *LimitStore) Delete(ctx context.Context, name string, fn ports.LimitDeleteFunc) (queue.Limit, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return queue.Limit{}, err
	}
	var rows []limitRow
	if err := s.st.tx.SelectContext(ctx, &rows, fmt.Sprintf(limitSelectSQL, `WHERE name = $1 FOR UPDATE`), name); err != nil {
		return queue.Limit{}, fmt.Errorf("lock named limit: %w", err)
	}
	if len(rows) == 0 {
		return queue.Limit{}, queue.ErrLimitNotFound
	}
	l := rows[0].limit()
	var queues pq.StringArray
	if err := s.st.tx.GetContext(ctx, &queues, `
		SELECT coalesce(array_agg(queue ORDER BY queue), '{}') FROM queue_settings WHERE limits @> ARRAY[$1]`, name); err != nil {
		return queue.Limit{}, fmt.Errorf("queues naming the limit: %w", err)
	}
	if len(queues) > 0 {
		return queue.Limit{}, &queue.LimitInUseError{Name: name, Queues: queues}
	}
	events, err := fn(l, now)
	if err != nil {
		return queue.Limit{}, err
	}
	if _, err := s.st.tx.ExecContext(ctx, `DELETE FROM named_limits WHERE name = $1`, name); err != nil {
		return queue.Limit{}, fmt.Errorf("delete named limit: %w", err)
	}
	s.st.Record(events...)
	return l, nil
}

// Missing implements ports.LimitStore.
func (s *LimitStore) Missing(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var found pq.StringArray
	if err := s.st.tx.GetContext(ctx, &found, `
		SELECT coalesce(array_agg(name), '{}') FROM (
			SELECT name FROM named_limits WHERE name = ANY($1) ORDER BY name FOR KEY SHARE) l`, pq.StringArray(names)); err != nil {
		return nil, fmt.Errorf("lock named limits: %w", err)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(found, n) {
			missing = append(missing, n)
		}
	}
	return missing, nil
}
