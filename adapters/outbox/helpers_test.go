package outbox

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a fresh database with the real use cases over it.
type env struct {
	db      *sqlx.DB
	tx      *postgres.TxRunner
	tasks   *application.TaskService
	workers *application.WorkerService
}

func setup(t *testing.T) *env {
	t.Helper()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig()}
	return &env{db: db, tx: tx, tasks: application.NewTaskService(tx, cfg), workers: application.NewWorkerService(tx, cfg)}
}

// storedMessage is one outbox row, decoded.
type storedMessage struct {
	pos           Position
	correlationID string
	events        []event.Event
}

// outboxMessages reads the whole outbox in delivery order.
func outboxMessages(t *testing.T, db *sqlx.DB) []storedMessage {
	t.Helper()
	var rows []struct {
		TransactionID string `db:"transaction_id"`
		Offset        int64  `db:"offset"`
		Payload       []byte `db:"payload"`
		Metadata      []byte `db:"metadata"`
	}
	require.NoError(t, db.Select(&rows, `
		SELECT transaction_id::text AS transaction_id, "offset", payload, metadata
		FROM watermill_taskmaster_events ORDER BY transaction_id, "offset"`))
	out := make([]storedMessage, len(rows))
	for i, r := range rows {
		tx, err := strconv.ParseUint(r.TransactionID, 10, 64)
		require.NoError(t, err)
		var env postgres.Envelope
		require.NoError(t, json.Unmarshal(r.Payload, &env))
		var meta map[string]string
		require.NoError(t, json.Unmarshal(r.Metadata, &meta))
		out[i] = storedMessage{pos: Position{TransactionID: tx, Offset: r.Offset}, correlationID: meta[postgres.MetadataCorrelationID], events: env.Events}
	}
	return out
}

// types lists the event types of a message.
func (m storedMessage) types() []event.Type {
	out := make([]event.Type, len(m.events))
	for i, e := range m.events {
		out[i] = e.Type
	}
	return out
}

// truthCounts is SELECT queue, status, count(*) FROM tasks GROUP BY 1, 2.
func truthCounts(t *testing.T, db *sqlx.DB) map[string]int64 {
	t.Helper()
	return queryCounts(t, db, `SELECT queue || '/' || status, count(*) FROM tasks GROUP BY queue, status`)
}

// projectedCounts are the non-zero rows of queue_status_counts.
func projectedCounts(t *testing.T, db *sqlx.DB) map[string]int64 {
	t.Helper()
	return queryCounts(t, db, `SELECT queue || '/' || status, count FROM queue_status_counts WHERE count <> 0`)
}

func queryCounts(t *testing.T, db *sqlx.DB, query string) map[string]int64 {
	t.Helper()
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// waitCaughtUp polls until the consumer group's offset is at the last outbox
// message.
func waitCaughtUp(t *testing.T, db *sqlx.DB, group string) {
	t.Helper()
	require.Eventually(t, func() bool {
		var caughtUp bool
		require.NoError(t, db.Get(&caughtUp, `
			SELECT NOT EXISTS (
				SELECT 1 FROM watermill_taskmaster_events m, watermill_offsets_taskmaster_events o
				WHERE o.consumer_group = $1
					AND (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked))`, group))
		return caughtUp
	}, 30*time.Second, 10*time.Millisecond, "consumer group %s did not catch up", group)
}

// fastConfig polls often, for tests.
func fastConfig() Config {
	cfg := DefaultConfig()
	cfg.PollInterval = 10 * time.Millisecond
	cfg.ResendInterval = 10 * time.Millisecond
	cfg.BatchSize = 7 // several transactions per test, and batches that end mid-workload
	return cfg
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
