package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// The claim: one statement locks the claimable rows in claim order, exactly
// as many as it hands out, and assigns them to the claiming workers.
//
// The rule is task.Task.Claimable (eligibility) and task.Task.Claim (what a
// claim changes); claimEligible and claimAssign encode them, and
// TestClaimStatementAgreesWithTheDomain checks that they agree on tasks of
// every shape.
//
// Locking exactly what it returns: the statement's plan is
// Limit -> LockRows -> (ordered candidates), so LockRows locks a row only
// when Limit asks for one more, and skips rows other transactions hold (FOR
// UPDATE SKIP LOCKED). The candidates of one queue come in claim order from
// the claim index tasks_claim (queue, priority DESC, grank, seq) WHERE
// status = 'PENDING' (grank: the round-robin rank over the queue's groups,
// fairRankSQL); those of several queues from a Merge Append of one index scan
// per queue, each read only as far as the merge needs it, each candidate
// then locked by a primary-key probe (Limit -> Nested Loop -> (Merge Append,
// LockRows per candidate)), so a claim of 5 from 50 queues reads about 55
// index entries and locks 5 rows (the former statement locked up to the
// limit in every queue before cutting: 250).
//
// The statement's text depends on the number of queues (one branch each)
// and on whether the workers have tags; it is prepared once per connection
// (NewCachingConnector) and runs with a generic plan (claimPlanSettings).
//
// Several workers' claims on the same queues with the same tags are served
// by one statement (ports.ClaimGroupParams): the locked rows, in claim
// order, go round-robin to the requests' slots (a request of limit n has n
// slots), each request keeps what fits its byte cap, and the UPDATE assigns
// each row to its request's worker and lease.

// claimEligible is task.Task.Claimable for a row x: PENDING, run_at come,
// deadline (if any) not passed, tags a subset of the worker's. %[1]s is the
// row's alias, %[2]s the tag condition (claimTagsNone or claimTagsSubset).
const claimEligible = `%[1]s.status = 'PENDING' AND %[1]s.run_at <= now()
		AND (%[1]s.deadline IS NULL OR %[1]s.deadline > now()) AND %[2]s`

// Tag conditions (%[1]s: the row's alias, %[2]d: the number of the
// workers' tags parameter, $7 in the general statement). A worker without
// tags takes only untagged tasks, written "tags = '{}'" rather than
// "tags <@ '{}'": the planner estimates the first from column statistics
// and gives "<@" a fixed, tiny selectivity. (The cardinality test, a
// one-time filter, keeps the parameter typed in both shapes.)
const (
	claimTagsNone   = `%[1]s.tags = '{}' AND cardinality($%[2]d::text[]) = 0`
	claimTagsSubset = `%[1]s.tags <@ $%[2]d::text[]`
	// claimTagsAny is a push dispatcher's: it delivers every task of its
	// push queue, whatever the task's tags (task.Task.Deliverable). (%.0[1]s
	// takes the alias and prints nothing.)
	claimTagsAny = `%.0[1]scardinality($%[2]d::text[]) >= 0`
)

// claimRequests are the claim's requests ($1-$5: workers, limits, lease
// seconds, request ids, byte caps), numbered i from 1.
const claimRequests = `
	WITH reqs AS (
		SELECT r.worker, r.lim, r.secs, r.req, r.maxb, r.i
		FROM unnest($1::text[], $2::int[], $3::int[], $4::text[], $5::bigint[])
			WITH ORDINALITY AS r(worker, lim, secs, req, maxb, i)
	)`

// claimLockOne locks, of one queue ($8), up to $6 claimable rows in claim
// order.
const claimLockOne = `, locked AS (
		SELECT t.id, t.priority, t.grank, t.seq, ` + taskBytesSQL + ` AS bytes FROM tasks t
		WHERE t.queue = $8 AND %[1]s
		ORDER BY t.priority DESC, t.grank, t.seq
		LIMIT $6
		FOR UPDATE SKIP LOCKED
	)`

// claimLockMany locks, of several queues ($8, $9, ...), up to $6 claimable
// rows in claim order across them: %[2]s holds one ordered branch per queue
// (claimBranch), merged in claim order; each candidate the limit asks for
// is looked up by its id and locked there (FOR UPDATE SKIP LOCKED in the
// lateral subquery; the eligibility is checked again on t, the locked row,
// so that a row claimed since the branch read it is rechecked and
// skipped). The lateral lookup (OFFSET 0 keeps it from being flattened into
// a join) pins the plan to one primary-key probe per candidate: as a plain
// join, a table the statistics undercount (a bulk load not yet analyzed)
// made the planner scan every pending row per claim.
const claimLockMany = `, locked AS (
		SELECT l.id, c.priority, c.grank, c.seq, l.bytes
		FROM (%[2]s) c
		CROSS JOIN LATERAL (
			SELECT t.id, ` + taskBytesSQL + ` AS bytes FROM tasks t
			WHERE t.id = c.id AND %[1]s
			OFFSET 0
			FOR UPDATE SKIP LOCKED
		) l
		ORDER BY c.priority DESC, c.grank, c.seq
		LIMIT $6
	)`

// claimLockIDs locks, of the candidates $8 a planned claim chose
// (claimPlan), up to $6 that are still claimable, in claim order.
const claimLockIDs = `, locked AS (
		SELECT t.id, t.priority, t.grank, t.seq, ` + taskBytesSQL + ` AS bytes FROM tasks t
		WHERE t.id = ANY($8::uuid[]) AND %[1]s
		ORDER BY t.priority DESC, t.grank, t.seq
		LIMIT $6
		FOR UPDATE SKIP LOCKED
	)`

// claimBranch is one queue's candidates, in claim order, unlocked.
const claimBranch = `(SELECT x.id, x.priority, x.grank, x.seq FROM tasks x WHERE x.queue = $%d AND %s ORDER BY x.priority DESC, x.grank, x.seq)`

// claimAssign numbers the locked rows in claim order, deals them
// round-robin to the requests' slots, keeps for each request the rows whose
// running sum of estimated response bytes stays within its cap (and always
// its first), and marks them RUNNING under the request's worker with a
// fresh lease (task.Task.Claim): the attempt's time limit ends %s after
// the claim (claimTimeoutOwn or claimTimeoutDefault), and the attempt
// starts without progress. Each returned row carries its request's
// number and how many rows that request was dealt, to tell a claim the byte
// cap cut short. Rows dealt to no one's cap stay PENDING (and locked until
// the transaction ends: only when a byte cap cut a claim).
var claimAssign = `, numbered AS (
		SELECT l.id, l.bytes, row_number() OVER (ORDER BY l.priority DESC, l.grank, l.seq) AS n FROM locked l
	), slots AS (
		SELECT row_number() OVER (ORDER BY g.j, q.i) AS n, q.i
		FROM reqs q CROSS JOIN LATERAL generate_series(1, q.lim) AS g(j)
	), dealt AS (
		SELECT nb.id, s.i, sum(nb.bytes) OVER w AS upto, row_number() OVER w AS k,
			count(*) OVER (PARTITION BY s.i) AS offered
		FROM numbered nb JOIN slots s ON s.n = nb.n
		WINDOW w AS (PARTITION BY s.i ORDER BY nb.n ROWS UNBOUNDED PRECEDING)
	), cand AS (
		SELECT d.id, d.i, d.offered FROM dealt d JOIN reqs q ON q.i = d.i
		WHERE d.k = 1 OR d.upto <= q.maxb
	)
	UPDATE tasks t SET status = 'RUNNING', attempts = t.attempts + 1, worker_id = q.worker,
		lease_id = gen_random_uuid(), claimed_at = now(), updated_at = now(),
		lease_seconds = q.secs, lease_expires_at = now() + q.secs * interval '1 second',
		cancel_requested_at = NULL, claim_request_id = q.req,
		timeout_at = now() + %s * interval '1 second', progress = NULL
	FROM cand c JOIN reqs q ON q.i = c.i
	WHERE t.id = c.id
	RETURNING ` + prefixed("t.", taskColumns) + `, c.i AS request, c.offered AS offered`

// The time limit of a claimed attempt (task.Task.AttemptTimeoutSeconds):
// the task's own (NULL: none, and so is timeout_at); or, when a queue
// claimed from has a default (claimShape.timeouts), the task's own else its
// queue's, from the parallel arrays of queues and defaults that follow the
// queue parameters (%[1]d, %[2]d). Claims of queues without a default keep
// the plain expression: no look-up per row.
const (
	claimTimeoutOwn     = `t.timeout_seconds`
	claimTimeoutDefault = `coalesce(t.timeout_seconds,
			(SELECT d.secs FROM unnest($%[1]d::text[], $%[2]d::int[]) AS d(queue, secs) WHERE d.queue = t.queue))`
)

// claimOneEachSQL is the claim of the common case (claimShape.oneEach): one
// queue without limits or a default time limit, every request for one
// task. It locks, of queue $6, up to $4 claimable rows (%[1]s: claimEligible
// with the tag condition, tags $5) in claim order, and gives the n-th of
// them to the n-th request ($1-$3: workers, lease seconds, request ids):
// what claimAssign does when every request has one slot, and where a byte
// cap cannot cut (a request keeps its first task whatever its size), without
// its slots, deals and running sums. The returned rows carry their
// request's number, and offered 1.
var claimOneEachSQL = `
	WITH reqs AS (
		SELECT r.worker, r.secs, r.req, r.i FROM unnest($1::text[], $2::int[], $3::text[]) WITH ORDINALITY AS r(worker, secs, req, i)
	), locked AS (
		SELECT l.id, row_number() OVER (ORDER BY l.priority DESC, l.grank, l.seq) AS n FROM (
			SELECT t.id, t.priority, t.grank, t.seq FROM tasks t
			WHERE t.queue = $6 AND %[1]s
			ORDER BY t.priority DESC, t.grank, t.seq
			LIMIT $4
			FOR UPDATE SKIP LOCKED
		) l
	)
	UPDATE tasks t SET status = 'RUNNING', attempts = t.attempts + 1, worker_id = q.worker,
		lease_id = gen_random_uuid(), claimed_at = now(), updated_at = now(),
		lease_seconds = q.secs, lease_expires_at = now() + q.secs * interval '1 second',
		cancel_requested_at = NULL, claim_request_id = q.req,
		timeout_at = now() + ` + claimTimeoutOwn + ` * interval '1 second', progress = NULL
	FROM locked c JOIN reqs q ON q.i = c.n
	WHERE t.id = c.id
	RETURNING ` + prefixedTaskColumns + `, c.n AS request, 1::bigint AS offered`

// prefixedTaskColumns are taskColumns of the alias t.
var prefixedTaskColumns = prefixed("t.", taskColumns)

// claimShape is what a claim statement's text depends on: the number of
// queues it reads (0: it locks the candidates a planned claim chose, $8),
// whether the workers have tags, whether a queue has a default time limit,
// and whether it is the common case's statement (claimOneEachSQL: one
// queue, no limits and no default time limit, every request for one task).
type claimShape struct {
	queues   int
	tagged   bool
	timeouts bool
	oneEach  bool
	// anyTags: a push dispatcher's claim, blind to tags (claimTagsAny).
	anyTags bool
}

// timeoutParam is the number of the first parameter after the queues (or
// the planned candidates): the queues with a default time limit.
func (s claimShape) timeoutParam() int { return 8 + max(s.queues, 1) }

// claimStatements caches the statements' texts by shape.
var claimStatements sync.Map // claimShape -> string

// claimSQL returns the claim statement of shape s (s.queues >= 1).
func claimSQL(s claimShape) string {
	if q, ok := claimStatements.Load(s); ok {
		return q.(string)
	}
	tags := claimTagsNone
	switch {
	case s.anyTags:
		tags = claimTagsAny
	case s.tagged:
		tags = claimTagsSubset
	}
	tagParam := 7
	if s.oneEach {
		tagParam = 5
	}
	eligible := func(alias string) string {
		return fmt.Sprintf(claimEligible, alias, fmt.Sprintf(tags, alias, tagParam))
	}
	if s.oneEach {
		q := fmt.Sprintf(claimOneEachSQL, eligible("t"))
		claimStatements.Store(s, q)
		return q
	}
	var lock string
	switch {
	case s.queues == 0:
		lock = fmt.Sprintf(claimLockIDs, eligible("t"))
	case s.queues == 1:
		lock = fmt.Sprintf(claimLockOne, eligible("t"))
	default:
		branches := make([]string, s.queues)
		for i := range branches {
			branches[i] = fmt.Sprintf(claimBranch, 8+i, eligible("x"))
		}
		lock = fmt.Sprintf(claimLockMany, eligible("t"), strings.Join(branches, "\n\t\t\tUNION ALL "))
	}
	limit := claimTimeoutOwn
	if s.timeouts {
		limit = fmt.Sprintf(claimTimeoutDefault, s.timeoutParam(), s.timeoutParam()+1)
	}
	q := claimRequests + lock + fmt.Sprintf(claimAssign, limit)
	claimStatements.Store(s, q)
	return q
}

// claimPlanSettings pin the claim statement's plan for the transaction:
// a generic plan (planned once per connection; for a custom plan PostgreSQL
// spends about as long planning the statement as running it), built with
// bitmap and sequential scans and explicit sorts off, run without JIT
// compilation.
//
// Without statistics (a queue that filled up since the last ANALYZE, a
// table never analyzed) every index on the queue looks as cheap for the
// one row the planner expects, and it prefers sorting every pending row of
// the queue (1.7 s per claim on a fresh 1M backlog) to walking the claim
// index, whether through a sequential or bitmap scan or through another
// index on the queue that happens to be smaller (tasks_group_rank: 25-50 ms
// per claim of 5 on a 12k queue in the single scenario; the claim index,
// which no claim walked then, also kept every dead entry of its head until
// a vacuum). With sorts costed as disabled, an index scan that yields the
// claim order wins wherever one exists; the statement's other sorts (the
// window functions over the few locked rows, a planned claim's candidates)
// have no sort-free alternative and keep their plans.
//
// The generic plan does not know the limit ($6) and costs the statement as
// if it read a tenth of the table: on a large backlog that passes
// jit_above_cost and the optimize and inline thresholds, and compiling the
// plan, at every execution, took ~3 s per claim of one task on a 1M backlog.
//
// They are sent as SET LOCAL commands in one message (no parameters, so no
// plan of their own), before the claim transaction's first statement
// (TouchLiveEach): the statements that read the workers and the held tasks
// are then planned once per connection too.
const claimPlanSettings = `SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off; SET LOCAL jit = off`

// reportPlanSettings pin the plans of a shared transaction of reports
// (CompleteEach, TouchEach): generic plans, planned once per connection
// (each of those statements keys its rows by arrays, whose custom plans
// PostgreSQL prefers and makes again at every execution: 0.1-0.3 ms each,
// as long as running them), never a sequential or bitmap scan of the
// tasks table (a generic plan made while the table was small would
// otherwise keep scanning it once it is large and not yet analyzed), and
// no JIT. Sorts stay allowed: a report's statements order the few rows
// they lock.
const reportPlanSettings = `SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL enable_bitmapscan = off;
	SET LOCAL enable_seqscan = off; SET LOCAL jit = off`

// planSettings are the sets of settings a transaction pins (pinPlans).
type planSettings uint8

const (
	reportPlans planSettings = 1 << iota
	claimPlans
)

// pinPlans applies the settings of want once per transaction (the claim's
// include the report's).
func (s *txState) pinPlans(ctx context.Context, want planSettings) error {
	if want == reportPlans && s.plans != 0 {
		return nil
	}
	if want == claimPlans && s.plans&claimPlans != 0 {
		return nil
	}
	q := reportPlanSettings
	if want == claimPlans {
		q = claimPlanSettings
	}
	if _, err := s.tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("plan settings: %w", err)
	}
	s.plans |= want
	return nil
}

// claimQueuesSQL lists the queues that have PENDING tasks, with the claim
// order of their first: a loose index scan of tasks_claim, one descent per
// queue. A claim from any queue claims from the best maxClaimQueues of them
// (paused and push queues left out: a claim from any queue is a worker's).
const claimQueuesSQL = `
	WITH RECURSIVE q(name) AS (
		SELECT min(queue) FROM tasks WHERE status = 'PENDING'
		UNION ALL
		SELECT (SELECT min(queue) FROM tasks WHERE status = 'PENDING' AND queue > q.name)
		FROM q WHERE q.name IS NOT NULL
	)
	SELECT q.name, h.priority, h.grank, h.seq FROM q
	CROSS JOIN LATERAL (
		SELECT t.priority, t.grank, t.seq FROM tasks t WHERE t.status = 'PENDING' AND t.queue = q.name
		ORDER BY t.priority DESC, t.grank, t.seq LIMIT 1
	) h
	WHERE q.name IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM queue_settings s WHERE s.queue = q.name AND (s.paused OR s.push_url IS NOT NULL))`

// maxClaimQueues bounds the queues one claim statement merges
// (worker.MaxQueues: a registered worker never names more).
const maxClaimQueues = 64

// claimedRow is a row the claim statement returned.
type claimedRow struct {
	taskRow
	Request int   `db:"request"`
	Offered int64 `db:"offered"`
}

// Claim implements ports.TaskStore: a group of one.
func (s *TaskStore) Claim(ctx context.Context, p ports.ClaimParams) ([]*task.Task, bool, error) {
	out, err := s.ClaimGroup(ctx, ports.ClaimGroupParams{
		Queues: p.Queues, WorkerTags: p.WorkerTags, Push: p.Push,
		Requests: []ports.ClaimRequest{{WorkerID: p.WorkerID, Limit: p.Limit, LeaseSeconds: p.LeaseSeconds, RequestID: p.RequestID, MaxBytes: p.MaxBytes}},
	})
	if err != nil {
		return nil, false, err
	}
	return out[0].Tasks, out[0].Truncated, nil
}

// ClaimGroup implements ports.TaskStore with one statement after a read of
// the queues' settings (and of the queues that have claimable tasks, when
// the group claims from any queue). Paused queues are left out, and so are
// push queues from workers' claims and other queues from push dispatchers'
// claims; a claim that reads a queue with a limit is planned (claimPlan).
func (s *TaskStore) ClaimGroup(ctx context.Context, p ports.ClaimGroupParams) ([]ports.ClaimOutcome, error) {
	n := len(p.Requests)
	out := make([]ports.ClaimOutcome, n)
	for i := range out {
		out[i].Tasks = []*task.Task{}
	}
	var (
		workers  = make(pq.StringArray, n)
		limits   = make(pq.Int64Array, n)
		secs     = make(pq.Int64Array, n)
		requests = make([]sql.NullString, n)
		caps     = make(pq.Int64Array, n)
		total    int64
	)
	for i, r := range p.Requests {
		if err := task.ValidateLeaseSeconds("lease_seconds", r.LeaseSeconds); err != nil {
			return nil, err
		}
		if r.Limit < 1 {
			return nil, fmt.Errorf("claim: limit %d must be at least 1", r.Limit)
		}
		workers[i], limits[i], secs[i], requests[i] = r.WorkerID, int64(r.Limit), int64(r.LeaseSeconds), nullString(r.RequestID)
		caps[i] = r.MaxBytes
		if caps[i] <= 0 {
			caps[i] = math.MaxInt64
		}
		total += int64(r.Limit)
	}
	if n == 0 {
		return out, nil
	}
	if err := s.st.pinPlans(ctx, claimPlans); err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	queues := p.Queues
	if len(queues) == 0 && p.Push {
		return out, nil // a dispatcher names its push queue
	}
	if len(queues) == 0 {
		var err error
		if queues, err = s.claimableQueues(ctx, total); err != nil {
			return nil, err
		}
		if len(queues) == 0 {
			return out, nil
		}
	}
	tags := pq.StringArray(p.WorkerTags)
	if tags == nil {
		tags = pq.StringArray{}
	}
	lim, err := s.claimLimits(ctx, queues, p.Push)
	if err != nil {
		return nil, err
	}
	if lim.limited() {
		for i := range out {
			out[i].Limited = true
		}
	}
	if queues = lim.open(queues); len(queues) == 0 {
		return out, nil
	}
	args := []any{workers, limits, secs, nullTexts(requests), caps, total, tags}
	shape := claimShape{queues: len(queues), tagged: len(tags) > 0, anyTags: p.Push}
	var timeoutQueues pq.StringArray
	var timeoutSecs pq.Int64Array
	for _, q := range queues {
		if secs, ok := lim.timeouts[q]; ok {
			timeoutQueues, timeoutSecs = append(timeoutQueues, q), append(timeoutSecs, int64(secs))
		}
	}
	shape.timeouts = len(timeoutQueues) > 0
	if shape.oneEach = oneEachClaim(queues, lim, shape.timeouts, n, total); shape.oneEach {
		args = []any{workers, secs, nullTexts(requests), total, tags, queues[0]}
	} else if lim.limited() {
		ids, err := s.planClaim(ctx, lim, queues, tags, total, p.Push)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return out, nil
		}
		shape.queues = 0
		args = append(args, pq.Array(ids))
	} else {
		for _, q := range queues {
			args = append(args, q)
		}
	}
	if shape.timeouts && !shape.oneEach {
		args = append(args, timeoutQueues, timeoutSecs)
	}
	rows, err := selectRows(ctx, s.st.tx, claimedRowFields, claimSQL(shape), args...)
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	if err := s.takeTokens(ctx, lim, rows); err != nil {
		return nil, err
	}
	sort.Slice(rows, func(i, j int) bool { return claimsBefore(&rows[i].taskRow, &rows[j].taskRow) })
	events := make([]event.Event, 0, len(rows))
	for i := range rows {
		t := rows[i].toDomain()
		o := &out[rows[i].Request-1]
		o.Tasks = append(o.Tasks, t)
		e := task.Claimed(t)
		e.CorrelationID = p.Requests[rows[i].Request-1].CorrelationID
		events = append(events, e)
	}
	for i := range rows {
		// The request was dealt more rows than it kept: its byte cap cut it.
		o := &out[rows[i].Request-1]
		o.Truncated = rows[i].Offered > int64(len(o.Tasks))
	}
	s.st.Record(events...)
	return out, nil
}

// oneEachClaim reports whether a claim of requests asking total tasks from
// queues, under lim, is the common case claimOneEachSQL serves: one queue,
// no limits and no default time limit, every request for one task.
func oneEachClaim(queues []string, lim *claimLimits, timeouts bool, requests int, total int64) bool {
	return len(queues) == 1 && !lim.limited() && !timeouts && total == int64(requests)
}

// claimableQueues returns the queues that have PENDING tasks, at most
// maxClaimQueues: those whose first task comes first in claim order. The
// first n claimable rows of all queues lie in the queues of the n best
// first rows, so for claims of up to maxClaimQueues tasks the choice loses
// nothing (rows other claims hold aside).
func (s *TaskStore) claimableQueues(ctx context.Context, n int64) ([]string, error) {
	var heads []struct {
		Name     string `db:"name"`
		Priority int    `db:"priority"`
		Grank    int64  `db:"grank"`
		Seq      int64  `db:"seq"`
	}
	if err := s.st.tx.SelectContext(ctx, &heads, claimQueuesSQL); err != nil {
		return nil, fmt.Errorf("claim: list queues: %w", err)
	}
	sort.Slice(heads, func(i, j int) bool {
		a, b := heads[i], heads[j]
		return claimOrder(a.Priority, a.Grank, a.Seq, b.Priority, b.Grank, b.Seq)
	})
	heads = heads[:min(len(heads), maxClaimQueues)]
	out := make([]string, len(heads))
	for i, h := range heads {
		out[i] = h.Name
	}
	return out, nil
}

// claimsBefore orders rows as claims hand them out: priority DESC, then
// round-robin rank, then FIFO.
func claimsBefore(a, b *taskRow) bool {
	return claimOrder(a.Priority, a.Grank, a.Seq, b.Priority, b.Grank, b.Seq)
}

// claimOrder reports whether a task (priority pa, rank ra, seq sa) comes
// before another (pb, rb, sb) in claim order.
func claimOrder(pa int, ra, sa int64, pb int, rb, sb int64) bool {
	if pa != pb {
		return pa > pb
	}
	if ra != rb {
		return ra < rb
	}
	return sa < sb
}
