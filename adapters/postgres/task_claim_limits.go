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

// Claims under queue settings (issue 14; domain/queue).
//
// Every claim reads the settings of the queues it claims from, in one
// indexed look-up of queue_settings that finds nothing for queues nobody
// configured. Paused queues are left out. When a queue has a limit
// (max_running, a rate limit, max_running_per_group), the claim locks that
// queue's settings row (FOR NO KEY UPDATE, in queue order: no deadlock
// between claims of overlapping queues) until it commits, so claims of a
// limited queue take turns across all instances; under the lock it counts
// the queue's RUNNING tasks (per group when capped per group) and refills
// the token bucket at the database clock, and the claim is planned: the
// candidates of each queue are read in claim order, at most the queue's
// allowance of them (a window of maxGroupScan when groups are capped), then
// chosen in claim order within each queue's allowance and each group's
// room, and only the chosen rows are locked and claimed (claimLockIDs).
// The rate limit's bucket is then charged with what the claim took.
// Queues without a limit keep the single-statement claim and never touch a
// settings row's lock.

// claimSettingsSQL reads the settings rows of queues $1 that restrict
// claims or give their attempts a default time limit.
// claimLockSettingsSQL locks those with a limit.
const (
	claimRestricts       = `(paused OR max_running IS NOT NULL OR rate_per_second IS NOT NULL OR max_running_per_group IS NOT NULL)`
	claimSettingsSQL     = `SELECT ` + queueSettingsColumns + ` FROM queue_settings WHERE queue = ANY($1) AND (` + claimRestricts + ` OR default_timeout_seconds IS NOT NULL)`
	claimLockSettingsSQL = `SELECT ` + queueSettingsColumns + ` FROM queue_settings
		WHERE queue = ANY($1) AND NOT paused AND ` + claimRestricts + `
		ORDER BY queue FOR NO KEY UPDATE`
)

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

// claimTakeTokensSQL charges the buckets of queues $1 with their new levels
// $2 at $3.
const claimTakeTokensSQL = `
	UPDATE queue_settings s SET tokens = u.tokens, tokens_at = $3
	FROM unnest($1::text[], $2::float8[]) AS u(queue, tokens)
	WHERE s.queue = u.queue`

// maxGroupScan bounds the candidates a claim reads of a queue capped per
// group: its first tasks in claim order, round-robin over the groups, so
// that a group at its cap holds at most one candidate per round; a claim
// that finds only capped groups' tasks there takes nothing this time (a
// later claim looks again).
const maxGroupScan = 2048

// limitedQueue is a limited queue as a claim found it under its lock.
type limitedQueue struct {
	row   queueSettingsRow
	state queue.State
	// groups are the RUNNING tasks by group (per-group caps only).
	groups map[string]int
}

// claimLimits is what a claim learned of its queues' settings.
type claimLimits struct {
	paused map[string]bool
	queues map[string]*limitedQueue
	now    time.Time
	// timeouts are the default time limits of the queues that have one
	// (default_timeout_seconds).
	timeouts map[string]int
}

// limited reports whether any of the claim's queues has a limit.
func (l *claimLimits) limited() bool { return len(l.queues) > 0 }

// open returns queues without the paused ones.
func (l *claimLimits) open(queues []string) []string {
	if len(l.paused) == 0 {
		return queues
	}
	return slices.DeleteFunc(slices.Clone(queues), func(q string) bool { return l.paused[q] })
}

// claimLimits reads the settings of queues, locks the limited ones and
// reads their running counts and the clock.
func (s *TaskStore) claimLimits(ctx context.Context, queues []string) (*claimLimits, error) {
	l := &claimLimits{}
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
		if rows[i].Paused {
			if l.paused == nil {
				l.paused = map[string]bool{}
			}
			l.paused[rows[i].Queue] = true
		} else if rows[i].settings().Limited() {
			limited = true
		}
	}
	if !limited {
		return l, nil
	}
	// Lock, then read again: a change committed since the first read is
	// what the lock's holder sees.
	rows = rows[:0]
	if err := s.st.tx.SelectContext(ctx, &rows, claimLockSettingsSQL, pq.StringArray(queues)); err != nil {
		return nil, fmt.Errorf("claim: lock queue settings: %w", err)
	}
	if len(rows) == 0 {
		return l, nil
	}
	l.queues = make(map[string]*limitedQueue, len(rows))
	names := make(pq.StringArray, len(rows))
	for i := range rows {
		names[i] = rows[i].Queue
		l.queues[rows[i].Queue] = &limitedQueue{row: rows[i], state: queue.State{Settings: rows[i].settings(), Bucket: rows[i].bucket()}}
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
// each limited queue's allowance and each group's room.
//
// A queue capped per group is read in a window of candidates: first 8 per
// task asked (at least 64), doubled while groups at their cap leave the
// claim short and the window came back full, up to maxGroupScan.
func (s *TaskStore) planClaim(ctx context.Context, l *claimLimits, queues []string, tags pq.StringArray, total int64) ([]uuid.UUID, error) {
	allow := make(map[string]int, len(queues))
	window := make(map[string]int, len(queues))
	for _, name := range queues {
		a := int(total)
		if q := l.queues[name]; q != nil {
			if n := q.state.Allowance(l.now); n >= 0 {
				a = min(a, n)
			}
			if q.state.Settings.MaxRunningPerGroup != nil && a > 0 {
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
	if len(tags) > 0 {
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
		ids, short := l.choose(cands, allow, total)
		grown := false
		for name := range short {
			if w := window[name]; l.queues[name] != nil && l.queues[name].state.Settings.MaxRunningPerGroup != nil &&
				short[name] == w && w < maxGroupScan {
				window[name], grown = min(2*w, maxGroupScan), true
			}
		}
		if !grown || int64(len(ids)) == total {
			return ids, nil
		}
	}
}

// choose picks, of cands, in claim order, at most total within each
// queue's allowance and each capped group's room. short counts, for each
// queue whose allowance was not used up, the candidates it was read (a full
// window: more may wait beyond it).
func (l *claimLimits) choose(cands []candidate, allow map[string]int, total int64) (ids []uuid.UUID, short map[string]int) {
	sort.Slice(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		return claimOrder(a.Priority, a.Grank, a.Seq, b.Priority, b.Grank, b.Seq)
	})
	left := maps.Clone(allow)
	read := map[string]int{}
	taken := map[string]map[string]int{}
	for i := range cands {
		c := &cands[i]
		read[c.Queue]++
		if int64(len(ids)) == total || left[c.Queue] == 0 {
			continue
		}
		if q := l.queues[c.Queue]; q != nil && c.GroupKey.Valid {
			g := taken[c.Queue]
			if g == nil {
				g = map[string]int{}
				taken[c.Queue] = g
			}
			if room := q.state.Settings.GroupRoom(q.groups[c.GroupKey.String]); room >= 0 && g[c.GroupKey.String] >= room {
				continue
			}
			g[c.GroupKey.String]++
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

// takeTokens charges the rate-limited queues' buckets with the tasks the
// claim took from them.
func (s *TaskStore) takeTokens(ctx context.Context, l *claimLimits, rows []claimedRow) error {
	var names pq.StringArray
	var levels pq.Float64Array
	for name, q := range l.queues {
		r := q.state.Settings.RateLimit
		if r == nil {
			continue
		}
		n := 0
		for i := range rows {
			if rows[i].Queue == name {
				n++
			}
		}
		if n == 0 {
			continue
		}
		names = append(names, name)
		levels = append(levels, q.state.Bucket.Take(*r, l.now, n).Tokens)
	}
	if len(names) == 0 {
		return nil
	}
	if _, err := s.st.tx.ExecContext(ctx, claimTakeTokensSQL, names, levels, l.now); err != nil {
		return fmt.Errorf("claim: take tokens: %w", err)
	}
	return nil
}
