package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

const workerColumns = `id, queues, tags, status, registered_at, last_heartbeat_at, draining, owner_key_id`

type workerRow struct {
	ID              string         `db:"id"`
	Queues          pq.StringArray `db:"queues"`
	Tags            pq.StringArray `db:"tags"`
	Status          string         `db:"status"`
	RegisteredAt    time.Time      `db:"registered_at"`
	LastHeartbeatAt time.Time      `db:"last_heartbeat_at"`
	Draining        bool           `db:"draining"`
	OwnerKeyID      sql.NullString `db:"owner_key_id"`
}

type workerRowNow struct {
	workerRow
	Now time.Time `db:"db_now"`
}

func (r *workerRow) toDomain() *worker.Worker {
	return worker.Restore(worker.Snapshot{
		ID: r.ID, Queues: []string(r.Queues), Tags: []string(r.Tags), Status: worker.Status(r.Status),
		RegisteredAt: r.RegisteredAt, LastHeartbeatAt: r.LastHeartbeatAt, Draining: r.Draining,
		Owner: r.OwnerKeyID.String,
	})
}

// WorkerStore implements ports.WorkerStore on one transaction.
type WorkerStore struct {
	st *txState
}

var _ ports.WorkerStore = (*WorkerStore)(nil)

// Upsert implements ports.WorkerStore.
func (s *WorkerStore) Upsert(ctx context.Context, id string, fn func(*worker.Worker, time.Time) (*worker.Worker, []event.Event, error)) (*worker.Worker, bool, error) {
	for range 2 {
		var row workerRowNow
		err := s.st.tx.GetContext(ctx, &row, `SELECT `+workerColumns+`, now() AS db_now FROM workers WHERE id = $1 FOR UPDATE`, id)
		switch {
		case err == nil:
			s.st.setNow(row.Now)
			w, events, err := fn(row.toDomain(), row.Now)
			if err != nil {
				return nil, false, err
			}
			if err := s.save(ctx, w); err != nil {
				return nil, false, err
			}
			s.st.Record(events...)
			return w, false, nil
		case !errors.Is(err, sql.ErrNoRows):
			return nil, false, fmt.Errorf("load worker: %w", err)
		}
		now, err := s.st.Now(ctx)
		if err != nil {
			return nil, false, err
		}
		w, events, err := fn(nil, now)
		if err != nil {
			return nil, false, err
		}
		v := w.Snapshot()
		res, err := s.st.tx.ExecContext(ctx, `
			INSERT INTO workers (`+workerColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8::uuid)
			ON CONFLICT (id) DO NOTHING`,
			v.ID, pq.StringArray(v.Queues), pq.StringArray(v.Tags), string(v.Status), v.RegisteredAt, v.LastHeartbeatAt, v.Draining,
			nullString(v.Owner))
		if err != nil {
			return nil, false, fmt.Errorf("insert worker: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			s.st.Record(events...)
			return w, true, nil
		}
		// A concurrent registration of the same id won; update it instead.
	}
	return nil, false, fmt.Errorf("register worker %q: concurrent registrations did not settle", id)
}

// Get implements ports.WorkerStore.
func (s *WorkerStore) Get(ctx context.Context, id string) (*worker.Worker, error) {
	if !storableText(id) {
		return nil, worker.ErrNotFound
	}
	var row workerRow
	if err := s.st.tx.GetContext(ctx, &row, `SELECT `+workerColumns+` FROM workers WHERE id = $1`, id); err != nil {
		return nil, notFound(err, worker.ErrNotFound)
	}
	return row.toDomain(), nil
}

// Update implements ports.WorkerStore.
func (s *WorkerStore) Update(ctx context.Context, id string, fn ports.WorkerUpdateFunc) (*worker.Worker, error) {
	if !storableText(id) {
		return nil, worker.ErrNotFound
	}
	var row workerRowNow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+workerColumns+`, now() AS db_now FROM workers WHERE id = $1 FOR UPDATE`, id)
	if err != nil {
		return nil, notFound(err, worker.ErrNotFound)
	}
	s.st.setNow(row.Now)
	w := row.toDomain()
	events, err := fn(w, row.Now)
	if err != nil {
		return nil, err
	}
	if err := s.save(ctx, w); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return w, nil
}

// Touch implements ports.WorkerStore: it reads without locking and saves
// only when the row still holds what was read.
func (s *WorkerStore) Touch(ctx context.Context, id string, fn ports.WorkerTouchFunc) (*worker.Worker, error) {
	if !storableText(id) {
		return nil, worker.ErrNotFound
	}
	var row workerRowNow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+workerColumns+`, now() AS db_now FROM workers WHERE id = $1`, id)
	if err != nil {
		return nil, notFound(err, worker.ErrNotFound)
	}
	s.st.setNow(row.Now)
	w := row.toDomain()
	events, changed, err := fn(w, row.Now)
	if err != nil || !changed {
		return w, err
	}
	v := w.Snapshot()
	res, err := s.st.tx.ExecContext(ctx, `
		UPDATE workers SET status = $2, last_heartbeat_at = $3
		WHERE id = $1 AND status = $4 AND last_heartbeat_at = $5`,
		id, string(v.Status), v.LastHeartbeatAt, row.Status, row.LastHeartbeatAt)
	if err != nil {
		return nil, fmt.Errorf("touch worker: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		s.st.Record(events...)
	}
	return w, nil
}

// workerLivenessLock is the first key of the transaction-level advisory lock
// that guards a worker's liveness; the second is hashtext(worker id). A claim
// holds it shared (TouchLive), the heartbeat reaper takes it exclusively,
// without waiting, before it changes a worker's liveness (silentWorkersSQL).
// Two workers whose ids hash alike share a lock: the reaper then skips one of
// them for a cycle while the other claims, nothing worse.
const workerLivenessLock int32 = 0x746d776b // "tmwk"

// TouchLive implements ports.WorkerStore: a shared advisory lock, then Touch.
// The lock lives in PostgreSQL's lock table only: holding it writes nothing
// and gives the transaction no transaction id, unlike a row lock (FOR KEY
// SHARE would dirty the worker's row, log it, and make even an empty claim
// commit with a WAL flush).
func (s *WorkerStore) TouchLive(ctx context.Context, id string, fn ports.WorkerTouchFunc) (*worker.Worker, error) {
	if !storableText(id) {
		return nil, worker.ErrNotFound
	}
	if _, err := s.st.tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock_shared($1, hashtext($2))`, workerLivenessLock, id); err != nil {
		return nil, fmt.Errorf("lock worker liveness: %w", err)
	}
	// Read after the lock, in a statement of its own: its snapshot then
	// includes whatever a reaper that held the lock committed.
	return s.Touch(ctx, id, fn)
}

// List implements ports.WorkerStore.
func (s *WorkerStore) List(ctx context.Context) ([]*worker.Worker, error) {
	var rows []workerRow
	if err := s.st.tx.SelectContext(ctx, &rows, `SELECT `+workerColumns+` FROM workers ORDER BY id`); err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := make([]*worker.Worker, len(rows))
	for i := range rows {
		out[i] = rows[i].toDomain()
	}
	return out, nil
}

func (s *WorkerStore) save(ctx context.Context, w *worker.Worker) error {
	v := w.Snapshot()
	_, err := s.st.tx.ExecContext(ctx, `
		UPDATE workers SET queues = $2, tags = $3, status = $4, last_heartbeat_at = $5, draining = $6,
			owner_key_id = $7::uuid WHERE id = $1`,
		v.ID, pq.StringArray(v.Queues), pq.StringArray(v.Tags), string(v.Status), v.LastHeartbeatAt, v.Draining,
		nullString(v.Owner))
	if err != nil {
		return fmt.Errorf("save worker: %w", err)
	}
	return nil
}
