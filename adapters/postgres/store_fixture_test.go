package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// storeFixture is one test's database with a TxRunner over it.
type storeFixture struct {
	t  *testing.T
	db *sqlx.DB
	tx *postgres.TxRunner
}

func newStoreFixture(t *testing.T) *storeFixture {
	t.Helper()
	db := pgtest.NewDB(t)
	return &storeFixture{t: t, db: db, tx: postgres.NewTxRunner(db)}
}

// run runs fn in one transaction and requires it to commit.
func (f *storeFixture) run(fn func(ctx context.Context, st ports.Stores) error) {
	f.t.Helper()
	require.NoError(f.t, f.tx.Run(f.t.Context(), fn))
}

// submit creates a task (with a fresh UUIDv7 id unless p has one) in its own
// transaction and requires it to be new.
func (f *storeFixture) submit(p task.SubmitParams) *task.Task {
	f.t.Helper()
	t, created := f.create(p)
	require.True(f.t, created)
	return t
}

// create is TaskStore.Create in its own transaction.
func (f *storeFixture) create(p task.SubmitParams) (*task.Task, bool) {
	f.t.Helper()
	if p.ID == uuid.Nil {
		p.ID = uuid.Must(uuid.NewV7())
	}
	var (
		out     *task.Task
		created bool
	)
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, created, err = st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Submit(p, now)
		})
		return err
	})
	return out, created
}

// claim is TaskStore.Claim in its own transaction.
func (f *storeFixture) claim(p ports.ClaimParams) []*task.Task {
	f.t.Helper()
	p = claimDefaults(p)
	var out []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, _, err = st.Tasks.Claim(ctx, p)
		return err
	})
	return out
}

// claimDefaults fills what a test's claim leaves out: worker w1, limit
// 100, the default lease.
func claimDefaults(p ports.ClaimParams) ports.ClaimParams {
	if p.WorkerID == "" {
		p.WorkerID = "w1"
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.LeaseSeconds == 0 {
		p.LeaseSeconds = task.DefaultLeaseSeconds
	}
	return p
}

// get is TaskStore.Get in its own transaction.
func (f *storeFixture) get(id uuid.UUID) task.Snapshot {
	f.t.Helper()
	var out *task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Tasks.Get(ctx, id)
		return err
	})
	return out.Snapshot()
}

// register creates a worker in its own transaction.
func (f *storeFixture) register(p worker.RegisterParams) *worker.Worker {
	f.t.Helper()
	var out *worker.Worker
	f.run(func(ctx context.Context, st ports.Stores) error {
		var created bool
		var err error
		out, created, err = st.Workers.Upsert(ctx, p.ID, func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			require.Nil(f.t, existing)
			w, e, err := worker.Register(p, now)
			return w, []event.Event{e}, err
		})
		require.True(f.t, created)
		return err
	})
	return out
}

// exec runs one statement outside any use case (to stage a state).
func (f *storeFixture) exec(query string, args ...any) {
	f.t.Helper()
	_, err := f.db.ExecContext(f.t.Context(), query, args...)
	require.NoError(f.t, err)
}

// outboxMessage is one row of the outbox table.
type outboxMessage struct {
	Events   []event.Event
	Metadata map[string]string
}

// outbox returns every outbox message, oldest first.
func (f *storeFixture) outbox() []outboxMessage {
	f.t.Helper()
	var rows []struct {
		Payload  []byte `db:"payload"`
		Metadata []byte `db:"metadata"`
	}
	require.NoError(f.t, f.db.SelectContext(f.t.Context(), &rows,
		`SELECT payload, metadata FROM watermill_taskmaster_events ORDER BY "offset"`))
	out := make([]outboxMessage, len(rows))
	for i, r := range rows {
		events, err := envelope.Decode(r.Payload)
		require.NoError(f.t, err, "outbox payload %s", r.Payload)
		out[i].Events = events
		require.NoError(f.t, json.Unmarshal(r.Metadata, &out[i].Metadata), "outbox metadata %s", r.Metadata)
	}
	return out
}

// eventTypes lists the types of events, in order.
func eventTypes(events []event.Event) []event.Type {
	out := make([]event.Type, len(events))
	for i, e := range events {
		out[i] = e.Type
	}
	return out
}

// taskIDs lists the ids of tasks, in order.
func taskIDs(ts []*task.Task) []uuid.UUID {
	out := make([]uuid.UUID, len(ts))
	for i, t := range ts {
		out[i] = t.ID()
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// claimedTasks unwraps a use case's claim result.
func claimedTasks(r ports.ClaimResult, err error) ([]*task.Task, error) { return r.Tasks, err }
