package outbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// BenchmarkOutboxCost measures what appending a transition's events to the
// outbox costs: the same transaction with and without the watermill-sql
// publish, alternating, on a PostgreSQL with default durability (fsync and
// synchronous_commit on, unlike the test harness's server), over loopback.
//
//	go test -run '^$' -bench OutboxCost -benchtime 2000x ./adapters/outbox/
//
// Metrics: plain_us and outbox_us are the mean latency of one transaction
// without and with the publish; cost_us is the difference per transition and
// cost_pct the relative cost.
func BenchmarkOutboxCost(b *testing.B) {
	db := durableDB(b)
	b.Run("submit", func(b *testing.B) {
		compare(b, 1, nil, func(ctx context.Context, withOutbox bool) error { return submitTx(ctx, db, withOutbox) })
	})
	b.Run("submit_4_clients", func(b *testing.B) {
		comparePar(b, 4, func(ctx context.Context, withOutbox bool) error { return submitTx(ctx, db, withOutbox) })
	})
	b.Run("claim_100", func(b *testing.B) {
		// Each claim takes a fresh queue: claimed rows leave dead entries at
		// the head of the claim index, which would dominate the figure.
		var queue string
		prepare := func(ctx context.Context) error {
			queue = "claim-" + uuid.NewString()
			return insertPending(ctx, db, queue, 100)
		}
		compare(b, 100, prepare, func(ctx context.Context, withOutbox bool) error {
			return claimTx(ctx, db, queue, 100, withOutbox)
		})
	})
	b.Run("service_submit", func(b *testing.B) {
		// The whole use case through postgres.TxRunner (always with the outbox), for scale.
		svc := application.NewTaskService(postgres.NewTxRunner(db),
			application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig()})
		ctx := context.Background()
		b.ResetTimer()
		for b.Loop() {
			if _, _, err := svc.Submit(ctx, task.SubmitParams{Queue: "svc"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// compare runs op without and with the outbox, alternating, and reports the
// figures per transition (perOp transitions per transaction). prepare, when
// not nil, runs untimed before each op.
func compare(b *testing.B, perOp int, prepare func(ctx context.Context) error, op func(ctx context.Context, withOutbox bool) error) {
	ctx := context.Background()
	var plain, outbox time.Duration
	n := 0
	for b.Loop() {
		for _, with := range []bool{false, true} {
			if prepare != nil {
				b.StopTimer()
				if err := prepare(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			start := time.Now()
			if err := op(ctx, with); err != nil {
				b.Fatal(err)
			}
			if with {
				outbox += time.Since(start)
			} else {
				plain += time.Since(start)
			}
		}
		n++
	}
	report(b, n, perOp, plain, outbox)
}

// comparePar runs op from clients goroutines, in rounds alternating without
// and with the outbox (so that a growing table or a checkpoint weighs on
// both), and reports the wall time per transaction (the inverse of the
// throughput).
func comparePar(b *testing.B, clients int, op func(ctx context.Context, withOutbox bool) error) {
	ctx := context.Background()
	const rounds = 10
	n := max(b.N/rounds, 1) * rounds
	run := func(with bool, n int) time.Duration {
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		start := time.Now()
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := c; i < n; i += clients {
					if err := op(ctx, with); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.ResetTimer()
	var plain, outbox time.Duration
	for range rounds {
		plain += run(false, n/rounds)
		outbox += run(true, n/rounds)
	}
	report(b, n, 1, plain, outbox)
	b.ReportMetric(float64(n)/plain.Seconds(), "plain_tps")
	b.ReportMetric(float64(n)/outbox.Seconds(), "outbox_tps")
}

func report(b *testing.B, n, perOp int, plain, outbox time.Duration) {
	if n == 0 {
		return
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e3 }
	b.ReportMetric(us(plain), "plain_us")
	b.ReportMetric(us(outbox), "outbox_us")
	b.ReportMetric((us(outbox)-us(plain))/float64(perOp), "cost_us/transition")
	b.ReportMetric(100*(us(outbox)-us(plain))/us(plain), "cost_pct")
}

// publish appends events as one message, as postgres.TxRunner does.
func publish(ctx context.Context, tx *sqlx.Tx, events []event.Event) error {
	msg, err := envelope.NewMessage(ctx, events)
	if err != nil {
		return err
	}
	pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, nil)
	if err != nil {
		return err
	}
	return pub.Publish(envelope.Topic, msg)
}

// submitTx inserts one task (as the task store does) and, withOutbox, its
// submitted event.
func submitTx(ctx context.Context, db *sqlx.DB, withOutbox bool) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var now time.Time
	if err := tx.GetContext(ctx, &now, `SELECT now()`); err != nil {
		return err
	}
	t, e, err := task.Submit(task.SubmitParams{ID: uuid.New(), Queue: "submit", Payload: []byte(`{"n":1}`)}, now)
	if err != nil {
		return err
	}
	v := t.Snapshot()
	if _, err := tx.ExecContext(ctx, `
		INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts, run_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10)`,
		v.ID, v.Queue, string(v.Status), v.Priority, string(v.Payload), pq.StringArray{}, v.Attempts, v.MaxAttempts, v.RunAt, v.CreatedAt); err != nil {
		return err
	}
	if withOutbox {
		if err := publish(ctx, tx, []event.Event{e}); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func insertPending(ctx context.Context, db *sqlx.DB, queue string, n int) error {
	_, err := db.ExecContext(ctx, `
		INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at)
		SELECT gen_random_uuid(), $1, 'PENDING', 3, now(), now(), now() FROM generate_series(1, $2)`, queue, n)
	return err
}

// claimTx claims n tasks in one statement and, withOutbox, appends their n
// claimed events as one message.
func claimTx(ctx context.Context, db *sqlx.DB, queue string, n int, withOutbox bool) error {
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var rows []struct {
		ID        uuid.UUID `db:"id"`
		Attempts  int       `db:"attempts"`
		CreatedAt time.Time `db:"created_at"`
		ClaimedAt time.Time `db:"claimed_at"`
	}
	if err := tx.SelectContext(ctx, &rows, `
		WITH cand AS (
			SELECT id FROM tasks WHERE status = 'PENDING' AND queue = $1
			ORDER BY priority DESC, seq LIMIT $2 FOR UPDATE SKIP LOCKED
		)
		UPDATE tasks t SET status = 'RUNNING', attempts = t.attempts + 1, worker_id = 'bench',
			lease_id = gen_random_uuid(), claimed_at = now(), updated_at = now()
		FROM cand WHERE t.id = cand.id
		RETURNING t.id, t.attempts, t.created_at, t.claimed_at`, queue, n); err != nil {
		return err
	}
	if len(rows) != n {
		return fmt.Errorf("claimed %d of %d", len(rows), n)
	}
	if withOutbox {
		events := make([]event.Event, len(rows))
		for i, r := range rows {
			events[i] = event.Event{
				Version: event.Version, Type: event.TaskClaimed, TaskID: r.ID.String(), Queue: queue,
				From: "PENDING", To: "RUNNING", Attempt: r.Attempts, WorkerID: "bench", OccurredAt: r.ClaimedAt,
				QueueWaitSeconds: event.Seconds(r.ClaimedAt.Sub(r.CreatedAt)),
			}
		}
		if err := publish(ctx, tx, events); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// durableDB starts a PostgreSQL with default durability for the benchmark
// and returns a migrated database on it.
func durableDB(b *testing.B) *sqlx.DB {
	b.Helper()
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "taskmaster-bench-*")
	if err != nil {
		b.Fatal(err)
	}
	srv, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		_ = os.RemoveAll(dir)
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = srv.Stop()
		_ = os.RemoveAll(dir)
	})
	db, err := postgres.Open(ctx, srv.URL("postgres"), postgres.PoolConfig{MaxOpen: 8, MaxIdle: 8})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if err := postgres.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	return db
}
