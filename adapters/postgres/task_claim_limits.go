package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/queue"
)

// Claims under queue settings (issues 14 and 27; domain/queue).
//
// Every claim reads the settings of the queues it claims from, in one
// indexed look-up of queue_settings that finds nothing for queues nobody
// configured. Paused queues are left out, and so are push queues from
// workers' claims and every other queue from push dispatchers' claims. When
// a queue has a limit (max_running, a rate limit, max_running_per_group,
// rate_limit_per_group, named limits, a push queue's max_in_flight), the
// claim locks that queue's settings row (FOR NO KEY UPDATE, in queue order:
// no deadlock between claims of overlapping queues) until it commits, then
// the named limits its queues draw on (named_limits, FOR NO KEY UPDATE, in
// name order), so claims of a limited queue, and of queues sharing a named
// limit, take turns across all instances. Under the locks it counts the
// queue's RUNNING tasks (per group when capped per group) and those of
// every queue naming a limit with max_running, and refills the token
// buckets at the database clock, and the claim is planned: the candidates
// of each queue are read in claim order, at most the queue's allowance of
// them (a window of maxGroupScan when groups are capped or rate-limited),
// the buckets of their groups are read (rate_limit_per_group), then they
// are chosen in claim order within each queue's allowance, each named
// limit's (shared by the queues naming it) and each group's, and only the
// chosen rows are locked and claimed (claimLockIDs). The buckets (the
// queues', the named limits', the groups') are then charged with what the
// claim took. Queues without a limit keep the single-statement claim and
// never touch a settings row's lock.

// claimSettingsSQL reads the settings rows of queues $1 that restrict
// claims or give their attempts a default time limit. claimLockSettingsSQL
// locks those with a limit that the claim may take from (push queues when
// $2, the others otherwise).
const (
	claimRestricts = `(paused OR max_running IS NOT NULL OR rate_per_second IS NOT NULL OR max_running_per_group IS NOT NULL
		OR group_rate_per_second IS NOT NULL OR limits <> '{}' OR push_url IS NOT NULL)`
	claimSettingsSQL = `SELECT ` + queueSettingsColumns + ` FROM queue_settings WHERE queue = ANY($1) AND (` + claimRestricts +
		` OR default_timeout_seconds IS NOT NULL)`
	claimLockSettingsSQL = `SELECT ` + queueSettingsColumns + ` FROM queue_settings
		WHERE queue = ANY($1) AND NOT paused AND ` + claimRestricts + ` AND (push_url IS NOT NULL) = $2
		ORDER BY queue FOR NO KEY UPDATE`
)

// claimLockLimitsSQL locks the named limits $1, in name order.
const claimLockLimitsSQL = `SELECT name, rate_per_second, rate_burst, max_running, tokens, tokens_at
	FROM named_limits WHERE name = ANY($1) ORDER BY name FOR NO KEY UPDATE`

// claimLimitRunningSQL counts, for each named limit $1, the RUNNING tasks
// of every queue naming it.
const claimLimitRunningSQL = `
	SELECT l.name, count(t.id) AS n
	FROM unnest($1::text[]) AS l(name)
	JOIN queue_settings s ON s.limits @> ARRAY[l.name]
	JOIN tasks t ON t.queue = s.queue AND t.status = 'RUNNING'
	GROUP BY l.name`

// claimRunningSQL counts the RUNNING tasks of queues $1 by group, and reads
// the database clock after the settings locks were taken (the one row with
// a NULL queue when nothing runs).
const claimRunningSQL = `
	SELECT r.queue, r.group_key, coalesce(r.n, 0) AS n, clock_timestamp() AS now
	FROM (SELECT queue, group_key, count(*) AS n FROM tasks
		WHERE queue = ANY($1) AND status = 'RUNNING' GROUP BY queue, group_key) r
	RIGHT JOIN (SELECT 1) one ON true`

// claimCandidatesSQL reads, for each queue $1[i], its first $2[i] claimable
// tasks in claim order, unlocked. %s is the eligibility of x, its worker
// tags at $3.
const claimCandidatesSQL = `
	SELECT c.id, c.queue, c.group_key, c.priority, c.grank, c.seq
	FROM unnest($1::text[], $2::int[]) AS q(name, lim)
	CROSS JOIN LATERAL (
		SELECT x.id, x.queue, x.group_key, x.priority, x.grank, x.seq FROM tasks x
		WHERE x.queue = q.name AND %s
		ORDER BY x.priority DESC, x.grank, x.seq
		LIMIT q.lim
	) c`

// claimGroupBucketsSQL reads the buckets of the groups ($2) of queues
// ($1), pair by pair.
const claimGroupBucketsSQL = `
	SELECT b.queue, b.group_key, b.tokens, b.tokens_at
	FROM unnest($1::text[], $2::text[]) AS g(queue, group_key)
	JOIN queue_group_buckets b ON b.queue = g.queue AND b.group_key = g.group_key`

// claimTakeTokensSQL charges the buckets of queues $1 with their new levels
// $2 at $3.
const claimTakeTokensSQL = `
	UPDATE queue_settings s SET tokens = u.tokens, tokens_at = $3
	FROM unnest($1::text[], $2::float8[]) AS u(queue, tokens)
	WHERE s.queue = u.queue`

// claimTakeLimitTokensSQL charges the buckets of named limits $1 with
// their new levels $2 at $3.
const claimTakeLimitTokensSQL = `
	UPDATE named_limits l SET tokens = u.tokens, tokens_at = $3
	FROM unnest($1::text[], $2::float8[]) AS u(name, tokens)
	WHERE l.name = u.name`

// claimTakeGroupTokensSQL charges the buckets of the groups $2 of queues
// $1 with their new levels $3 at $4.
const claimTakeGroupTokensSQL = `
	INSERT INTO queue_group_buckets (queue, group_key, tokens, tokens_at)
	SELECT u.queue, u.group_key, u.tokens, $4 FROM unnest($1::text[], $2::text[], $3::float8[]) AS u(queue, group_key, tokens)
	ON CONFLICT (queue, group_key) DO UPDATE SET tokens = excluded.tokens, tokens_at = excluded.tokens_at`

// maxGroupScan bounds the candidates a claim reads of a queue whose groups
// are capped or rate-limited: its first tasks in claim order, round-robin
// over the groups, so that a group at its limit holds at most one
// candidate per round; a claim that finds only such groups' tasks there
// takes nothing this time (a later claim looks again).
const maxGroupScan = 2048

// limitedQueue is a limited queue as a claim found it under its lock.
type limitedQueue struct {
	row   queueSettingsRow
	state queue.State
	// groups are the RUNNING tasks by group (per-group caps only).
	groups map[string]int
	// buckets are the groups' buckets the claim read (rate_limit_per_group
	// only); a group without one has a full bucket.
	buckets map[string]queue.Bucket
	// limits are the named limits the queue draws on.
	limits []*namedLimit
}

// namedLimit is a named limit as a claim found it under its lock.
type namedLimit struct {
	state queue.LimitState
}

// claimLimits is what a claim learned of its queues' settings.
type claimLimits struct {
	// closed are the queues the claim takes nothing from: paused, or not
	// of the claim's kind (push or not).
	closed map[string]bool
	// push: a dispatcher's claim, which takes only from pushOpen.
	push     bool
	pushOpen map[string]bool
	queues   map[string]*limitedQueue
	limits   map[string]*namedLimit
	now      time.Time
	// timeouts are the default time limits of the queues that have one
	// (default_timeout_seconds).
	timeouts map[string]int
}

// limited reports whether any of the claim's queues has a limit.
func (l *claimLimits) limited() bool { return len(l.queues) > 0 }

// open returns queues without the closed ones.
func (l *claimLimits) open(queues []string) []string {
	if len(l.closed) == 0 && !l.push {
		return queues
	}
	return slices.DeleteFunc(slices.Clone(queues), func(q string) bool { return l.closed[q] || (l.push && !l.pushOpen[q]) })
}

// claimLimits reads the settings of queues, locks the limited ones (of the
// claim's kind: push queues for a dispatcher's claim) and the named limits
// they draw on, and reads their running counts and the clock.
func (s *TaskStore) claimLimits(ctx context.Context, queues []string, push bool) (*claimLimits, error) {
	l := &claimLimits{push: push}
	var rows []queueSettingsRow
	if err := s.st.tx.SelectContext(ctx, &rows, claimSettingsSQL, pq.StringArray(queues)); err != nil {
		return nil, fmt.Errorf("claim: queue settings: %w", err)
	}
	limited := false
	for i := range rows {
		if rows[i].DefaultTimeout.Valid {
			if l.timeouts == nil {
				l.timeouts = map[string]int{}
			}
			l.timeouts[rows[i].Queue] = int(rows[i].DefaultTimeout.Int64)
		}
		st := rows[i].settings()
		switch {
		case st.ClosedTo(push):
			if l.closed == nil {
				l.closed = map[string]bool{}
			}
			l.closed[rows[i].Queue] = true
		case st.Limited():
			limited = true
		}
	}
	if !limited {
		return l, nil
	}
	// Lock, then read again: a change committed since the first read is
	// what the lock's holder sees.
	rows = rows[:0]
	if err := s.st.tx.SelectContext(ctx, &rows, claimLockSettingsSQL, pq.StringArray(queues), push); err != nil {
		return nil, fmt.Errorf("claim: lock queue settings: %w", err)
	}
	if len(rows) == 0 {
		return l, nil
	}
	l.queues = make(map[string]*limitedQueue, len(rows))
	names := make(pq.StringArray, len(rows))
	var limitNames []string
	for i := range rows {
		names[i] = rows[i].Queue
		st := rows[i].settings()
		l.queues[rows[i].Queue] = &limitedQueue{row: rows[i], state: queue.State{Settings: st, Bucket: rows[i].bucket()}}
		if push {
			if l.pushOpen == nil {
				l.pushOpen = map[string]bool{}
			}
			l.pushOpen[rows[i].Queue] = true
		}
		for _, n := range st.Limits {
			if !slices.Contains(limitNames, n) {
				limitNames = append(limitNames, n)
			}
		}
	}
	if err := s.lockNamedLimits(ctx, l, limitNames); err != nil {
		return nil, err
	}
	var running []struct {
		Queue    sql.NullString `db:"queue"`
		GroupKey sql.NullString `db:"group_key"`
		N        int            `db:"n"`
		Now      time.Time      `db:"now"`
	}
	if err := s.st.tx.SelectContext(ctx, &running, claimRunningSQL, names); err != nil {
		return nil, fmt.Errorf("claim: running tasks: %w", err)
	}
	for _, r := range running {
		l.now = r.Now
		q := l.queues[r.Queue.String]
		if !r.Queue.Valid || q == nil {
			continue
		}
		q.state.Running += r.N
		if r.GroupKey.Valid && q.state.Settings.MaxRunningPerGroup != nil {
			if q.groups == nil {
				q.groups = map[string]int{}
			}
			q.groups[r.GroupKey.String] = r.N
		}
	}
	return l, nil
}

// lockNamedLimits locks the named limits names (in name order, after the
// queues' settings rows), counts the RUNNING tasks of the queues naming
// those with max_running, and ties each to the queues drawing on it.
func (s *TaskStore) lockNamedLimits(ctx context.Context, l *claimLimits, names []string) error {
	if len(names) == 0 {
		return nil
	}
	var rows []struct {
		Name       string          `db:"name"`
		PerSecond  sql.NullFloat64 `db:"rate_per_second"`
		Burst      sql.NullInt64   `db:"rate_burst"`
		MaxRunning sql.NullInt64   `db:"max_running"`
		Tokens     sql.NullFloat64 `db:"tokens"`
		TokensAt   sql.NullTime    `db:"tokens_at"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, claimLockLimitsSQL, pq.StringArray(names)); err != nil {
		return fmt.Errorf("claim: lock named limits: %w", err)
	}
	l.limits = make(map[string]*namedLimit, len(rows))
	var capped pq.StringArray
	for _, r := range rows {
		lim := queue.Limit{Name: r.Name, RateLimit: rateLimit(r.PerSecond, r.Burst)}
		if r.MaxRunning.Valid {
			lim.MaxRunning = intPtr(r.MaxRunning.Int64)
			capped = append(capped, r.Name)
		}
		l.limits[r.Name] = &namedLimit{state: queue.LimitState{Limit: lim, Bucket: bucketOf(r.Tokens, r.TokensAt)}}
	}
	if len(capped) > 0 {
		var counts []struct {
			Name string `db:"name"`
			N    int    `db:"n"`
		}
		if err := s.st.tx.SelectContext(ctx, &counts, claimLimitRunningSQL, capped); err != nil {
			return fmt.Errorf("claim: named limits' running tasks: %w", err)
		}
		for _, c := range counts {
			l.limits[c.Name].state.Running = c.N
		}
	}
	for _, q := range l.queues {
		for _, n := range q.state.Settings.Limits {
			if nl := l.limits[n]; nl != nil { // a deleted limit no longer limits
				q.limits = append(q.limits, nl)
			}
		}
	}
	return nil
}

// candidate is a claimable task a planned claim read.
type candidate struct {
	ID       uuid.UUID      `db:"id"`
	Queue    string         `db:"queue"`
	GroupKey sql.NullString `db:"group_key"`
	Priority int            `db:"priority"`
	Grank    int64          `db:"grank"`
	Seq      int64          `db:"seq"`
}

// planClaim chooses, in claim order, at most total tasks of queues within
// each limited queue's allowance, each named limit's and each group's.
//
// A queue whose groups are capped or rate-limited is read in a window of
// candidates: first 8 per task asked (at least 64), doubled while groups
// at their limit leave the claim short and the window came back full, up
// to maxGroupScan.
func (s *TaskStore) planClaim(ctx context.Context, l *claimLimits, queues []string, tags pq.StringArray, total int64, anyTags bool) ([]uuid.UUID, error) {
	allow := make(map[string]int, len(queues))
	window := make(map[string]int, len(queues))
	for _, name := range queues {
		a := int(total)
		if q := l.queues[name]; q != nil {
			if n := q.state.Allowance(l.now); n >= 0 {
				a = min(a, n)
			}
			for _, nl := range q.limits {
				if n := nl.state.Allowance(l.now); n >= 0 {
					a = min(a, n)
				}
			}
			if q.state.Settings.GroupLimited() && a > 0 {
				window[name] = min(max(8*a, 64), maxGroupScan)
			}
		}
		if a > 0 {
			allow[name] = a
			if window[name] == 0 {
				window[name] = a
			}
		}
	}
	if len(allow) == 0 {
		return nil, nil
	}
	tagCond := claimTagsNone
	switch {
	case anyTags:
		tagCond = claimTagsAny
	case len(tags) > 0:
		tagCond = claimTagsSubset
	}
	query := fmt.Sprintf(claimCandidatesSQL, fmt.Sprintf(claimEligible, "x", fmt.Sprintf(tagCond, "x", 3)))
	for {
		names := make(pq.StringArray, 0, len(allow))
		windows := make(pq.Int64Array, 0, len(allow))
		for _, name := range queues {
			if allow[name] > 0 {
				names, windows = append(names, name), append(windows, int64(window[name]))
			}
		}
		var cands []candidate
		if err := s.st.tx.SelectContext(ctx, &cands, query, names, windows, tags); err != nil {
			return nil, fmt.Errorf("claim: candidates: %w", err)
		}
		if err := s.readGroupBuckets(ctx, l, cands); err != nil {
			return nil, err
		}
		ids, short := l.choose(cands, allow, total)
		grown := false
		for name := range short {
			if w := window[name]; l.queues[name] != nil && l.queues[name].state.Settings.GroupLimited() &&
				short[name] == w && w < maxGroupScan {
				window[name], grown = min(2*w, maxGroupScan), true
			}
		}
		if !grown || int64(len(ids)) == total {
			return ids, nil
		}
	}
}

// readGroupBuckets reads the buckets of the candidates' groups in queues
// with rate_limit_per_group that the claim has not read yet.
func (s *TaskStore) readGroupBuckets(ctx context.Context, l *claimLimits, cands []candidate) error {
	var queues, groups pq.StringArray
	for i := range cands {
		c := &cands[i]
		q := l.queues[c.Queue]
		if q == nil || q.state.Settings.RateLimitPerGroup == nil || !c.GroupKey.Valid {
			continue
		}
		if q.buckets == nil {
			q.buckets = map[string]queue.Bucket{}
		}
		if _, seen := q.buckets[c.GroupKey.String]; seen {
			continue
		}
		q.buckets[c.GroupKey.String] = queue.Bucket{} // full unless a row says otherwise
		queues, groups = append(queues, c.Queue), append(groups, c.GroupKey.String)
	}
	if len(queues) == 0 {
		return nil
	}
	var rows []struct {
		Queue    string    `db:"queue"`
		GroupKey string    `db:"group_key"`
		Tokens   float64   `db:"tokens"`
		TokensAt time.Time `db:"tokens_at"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, claimGroupBucketsSQL, queues, groups); err != nil {
		return fmt.Errorf("claim: group buckets: %w", err)
	}
	for _, r := range rows {
		l.queues[r.Queue].buckets[r.GroupKey] = queue.Bucket{Tokens: r.Tokens, At: r.TokensAt}
	}
	return nil
}

// choose picks, of cands, in claim order, at most total within each
// queue's allowance, each named limit's (shared by the queues naming it)
// and each limited group's. short counts, for each queue whose allowance
// was not used up, the candidates it was read (a full window: more may
// wait beyond it).
func (l *claimLimits) choose(cands []candidate, allow map[string]int, total int64) (ids []uuid.UUID, short map[string]int) {
	sort.Slice(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		return claimOrder(a.Priority, a.Grank, a.Seq, b.Priority, b.Grank, b.Seq)
	})
	left := maps.Clone(allow)
	limitLeft := make(map[*namedLimit]int, len(l.limits))
	for _, nl := range l.limits {
		limitLeft[nl] = nl.state.Allowance(l.now)
	}
	read := map[string]int{}
	taken := map[string]map[string]int{}
candidates:
	for i := range cands {
		c := &cands[i]
		read[c.Queue]++
		if int64(len(ids)) == total || left[c.Queue] == 0 {
			continue
		}
		q := l.queues[c.Queue]
		if q != nil {
			for _, nl := range q.limits {
				if limitLeft[nl] == 0 {
					continue candidates
				}
			}
		}
		if q != nil && c.GroupKey.Valid && q.state.Settings.GroupLimited() {
			g := taken[c.Queue]
			if g == nil {
				g = map[string]int{}
				taken[c.Queue] = g
			}
			key := c.GroupKey.String
			if room := q.state.Settings.GroupAllowance(q.groups[key], q.buckets[key], l.now); room >= 0 && g[key] >= room {
				continue
			}
			g[key]++
		}
		if q != nil {
			for _, nl := range q.limits {
				if limitLeft[nl] > 0 {
					limitLeft[nl]--
				}
			}
		}
		left[c.Queue]--
		ids = append(ids, c.ID)
	}
	short = map[string]int{}
	for name, n := range left {
		if n > 0 {
			short[name] = read[name]
		}
	}
	return ids, short
}

// takeTokens charges the buckets with the tasks the claim took: the
// rate-limited queues', the named limits' (every task of a queue drawing
// on one) and the groups' (rate_limit_per_group).
func (s *TaskStore) takeTokens(ctx context.Context, l *claimLimits, rows []claimedRow) error {
	if !l.limited() || len(rows) == 0 {
		return nil
	}
	perQueue := map[string]int{}
	perGroup := map[[2]string]int{}
	for i := range rows {
		perQueue[rows[i].Queue]++
		if q := l.queues[rows[i].Queue]; q != nil && q.state.Settings.RateLimitPerGroup != nil && rows[i].GroupKey.Valid {
			perGroup[[2]string{rows[i].Queue, rows[i].GroupKey.String}]++
		}
	}
	var names pq.StringArray
	var levels pq.Float64Array
	perLimit := map[*namedLimit]int{}
	for name, q := range l.queues {
		n := perQueue[name]
		if n == 0 {
			continue
		}
		for _, nl := range q.limits {
			perLimit[nl] += n
		}
		if r := q.state.Settings.RateLimit; r != nil {
			names = append(names, name)
			levels = append(levels, q.state.Bucket.Take(*r, l.now, n).Tokens)
		}
	}
	if len(names) > 0 {
		if _, err := s.st.tx.ExecContext(ctx, claimTakeTokensSQL, names, levels, l.now); err != nil {
			return fmt.Errorf("claim: take tokens: %w", err)
		}
	}
	names, levels = nil, nil
	for nl, n := range perLimit {
		if r := nl.state.Limit.RateLimit; r != nil {
			names = append(names, nl.state.Limit.Name)
			levels = append(levels, nl.state.Bucket.Take(*r, l.now, n).Tokens)
		}
	}
	if len(names) > 0 {
		if _, err := s.st.tx.ExecContext(ctx, claimTakeLimitTokensSQL, names, levels, l.now); err != nil {
			return fmt.Errorf("claim: take named limits' tokens: %w", err)
		}
	}
	if len(perGroup) == 0 {
		return nil
	}
	var queues, groups pq.StringArray
	levels = nil
	for k, n := range perGroup {
		q := l.queues[k[0]]
		queues, groups = append(queues, k[0]), append(groups, k[1])
		levels = append(levels, q.buckets[k[1]].Take(*q.state.Settings.RateLimitPerGroup, l.now, n).Tokens)
	}
	if _, err := s.st.tx.ExecContext(ctx, claimTakeGroupTokensSQL, queues, groups, levels, l.now); err != nil {
		return fmt.Errorf("claim: take group tokens: %w", err)
	}
	return nil
}
