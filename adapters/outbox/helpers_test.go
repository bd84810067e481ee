package outbox

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/adapters/outbox/outboxtest"
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
		SELECT m.transaction_id::text AS transaction_id, m."offset", m.payload, m.metadata
		FROM watermill_taskmaster_events m ORDER BY m.transaction_id, m."offset"`))
	out := make([]storedMessage, len(rows))
	for i, r := range rows {
		tx, err := strconv.ParseUint(r.TransactionID, 10, 64)
		require.NoError(t, err)
		events, err := envelope.Decode(r.Payload)
		require.NoError(t, err)
		var meta map[string]string
		require.NoError(t, json.Unmarshal(r.Metadata, &meta))
		out[i] = storedMessage{pos: Position{TransactionID: tx, Offset: r.Offset}, correlationID: meta[envelope.MetadataCorrelationID], events: events}
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

// Shorthands for outboxtest's comparisons.
var (
	truthCounts     = outboxtest.TruthCounts
	projectedCounts = outboxtest.ProjectedCounts
	queryCounts     = outboxtest.Counts
)

func waitCaughtUp(t *testing.T, db *sqlx.DB) { outboxtest.WaitCaughtUp(t, db, ProjectionsGroup) }

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
