package bench

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// Database-side profiles of a scenario, for finding where the time goes:
// --statements N prints the N statements that took the most execution time
// (pg_stat_statements, which the benchmark's own PostgreSQL then loads), and
// --wait-events samples what every backend of the benchmark's database is
// doing every 10 ms (pg_stat_activity: running, waiting on what, or idle in
// a transaction, that is waiting for the client).

// statementsExtension prepares pg_stat_statements in the benchmark's
// database (the server loads it when the benchmark starts PostgreSQL with
// --statements).
func statementsExtension(ctx context.Context, db *sqlx.DB) error {
	_, err := db.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
	return err
}

// dbProfile collects the database-side profile of one scenario.
type dbProfile struct {
	db         *sqlx.DB
	statements int
	stop       chan struct{}
	done       chan struct{}

	mu      sync.Mutex
	samples int
	waits   map[string]int
}

// startDBProfile resets pg_stat_statements and starts sampling wait events,
// as the options ask; it returns nil when they ask for neither.
func startDBProfile(ctx context.Context, env *environment, opts Options) *dbProfile {
	if env.db == nil || (opts.Statements == 0 && !opts.WaitEvents) {
		return nil
	}
	p := &dbProfile{db: env.db, statements: opts.Statements, stop: make(chan struct{}), done: make(chan struct{}), waits: map[string]int{}}
	if p.statements > 0 {
		_ = statementsExtension(ctx, env.db)
		_, _ = env.db.ExecContext(ctx, `SELECT pg_stat_statements_reset()`)
	}
	if !opts.WaitEvents {
		close(p.done)
		return p
	}
	go p.sample()
	return p
}

func (p *dbProfile) sample() {
	defer close(p.done)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		var rows []struct {
			State string `db:"state"`
			Type  string `db:"wtype"`
			Event string `db:"wevent"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.db.SelectContext(ctx, &rows, `
			SELECT coalesce(state, '') AS state, coalesce(wait_event_type, '') AS wtype, coalesce(wait_event, '') AS wevent
			FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
		cancel()
		if err != nil {
			continue
		}
		p.mu.Lock()
		p.samples++
		for _, r := range rows {
			if r.State == "idle" {
				continue // between transactions: not the database's time
			}
			key := r.State
			if r.Type != "" {
				key += " / " + r.Type + ":" + r.Event
			}
			p.waits[key]++
		}
		p.mu.Unlock()
	}
}

// finish stops sampling and prints the profile; with finished tasks, also
// per task: statements, blocks and WAL (figures that do not depend on how
// busy the machine was).
func (p *dbProfile) finish(ctx context.Context, w io.Writer, finished int64) {
	if p == nil {
		return
	}
	close(p.stop)
	<-p.done
	if p.samples > 0 {
		type kv struct {
			k string
			n int
		}
		var all []kv
		for k, n := range p.waits {
			all = append(all, kv{k, n})
		}
		sort.Slice(all, func(i, j int) bool { return all[i].n > all[j].n })
		fmt.Fprintf(w, "  wait events (%d samples of non-idle client backends; average sessions in each state):\n", p.samples)
		for _, e := range all {
			fmt.Fprintf(w, "    %6.2f  %s\n", float64(e.n)/float64(p.samples), e.k)
		}
	}
	if p.statements == 0 {
		return
	}
	var rows []struct {
		Calls   int64   `db:"calls"`
		Total   float64 `db:"total_ms"`
		Mean    float64 `db:"mean_ms"`
		Plan    float64 `db:"plan_ms"`
		Rows    int64   `db:"rows"`
		HitBlks int64   `db:"hit"`
		Blks    int64   `db:"blks"`
		WAL     int64   `db:"wal_bytes"`
		Query   string  `db:"query"`
	}
	err := p.db.SelectContext(ctx, &rows, `
		SELECT calls, total_exec_time AS total_ms, mean_exec_time AS mean_ms, total_plan_time AS plan_ms, rows,
			shared_blks_hit AS hit, shared_blks_hit + shared_blks_read + shared_blks_dirtied + shared_blks_written AS blks,
			wal_bytes::bigint AS wal_bytes, query
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, p.statements)
	if err != nil {
		fmt.Fprintf(w, "  pg_stat_statements: %v\n", err)
		return
	}
	fmt.Fprintf(w, "  statements by total time (exec + plan):\n")
	for _, r := range rows {
		q := strings.Join(strings.Fields(r.Query), " ")
		if len(q) > 110 {
			q = q[:110] + "..."
		}
		fmt.Fprintf(w, "    %8.0f ms exec %7.0f ms plan %9d calls %7.3f ms mean %8d rows %10d WAL B  %s\n",
			r.Total, r.Plan, r.Calls, r.Mean, r.Rows, r.WAL, q)
		if finished > 0 {
			per := func(v int64) float64 { return float64(v) / float64(finished) }
			fmt.Fprintf(w, "             per task: %.3f calls, %.1f µs exec, %.1f µs plan, %.2f rows, %.1f blocks, %.0f WAL B\n",
				per(r.Calls), r.Total*1e3/float64(finished), r.Plan*1e3/float64(finished), per(r.Rows), per(r.Blks), per(r.WAL))
		}
	}
	if finished == 0 {
		return
	}
	var all struct {
		Calls int64   `db:"calls"`
		Exec  float64 `db:"exec_ms"`
		Plan  float64 `db:"plan_ms"`
		Blks  int64   `db:"blks"`
		WAL   int64   `db:"wal_bytes"`
	}
	if err := p.db.GetContext(ctx, &all, `
		SELECT coalesce(sum(calls), 0)::bigint AS calls, coalesce(sum(total_exec_time), 0) AS exec_ms, coalesce(sum(total_plan_time), 0) AS plan_ms,
			coalesce(sum(shared_blks_hit + shared_blks_read + shared_blks_dirtied + shared_blks_written), 0)::bigint AS blks,
			coalesce(sum(wal_bytes), 0)::bigint AS wal_bytes
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`); err != nil {
		fmt.Fprintf(w, "  pg_stat_statements: %v\n", err)
		return
	}
	f := float64(finished)
	fmt.Fprintf(w, "  all statements, per task: %.2f statements (round trips, BEGIN and COMMIT included), %.1f µs exec, %.1f µs plan, %.1f blocks, %.0f WAL B (%d tasks)\n",
		float64(all.Calls)/f, all.Exec*1e3/f, all.Plan*1e3/f, float64(all.Blks)/f, float64(all.WAL)/f, finished)
}
