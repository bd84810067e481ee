package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// KeysTable holds the API keys (their token digests).
const KeysTable = "api_keys"

const keyColumns = `id, name, hash, scopes, queues, worker_prefix, created_at, last_used_at, expires_at, revoked_at`

type keyRow struct {
	ID           uuid.UUID      `db:"id"`
	Name         string         `db:"name"`
	Hash         []byte         `db:"hash"`
	Scopes       pq.StringArray `db:"scopes"`
	Queues       pq.StringArray `db:"queues"`
	WorkerPrefix sql.NullString `db:"worker_prefix"`
	CreatedAt    time.Time      `db:"created_at"`
	LastUsedAt   sql.NullTime   `db:"last_used_at"`
	ExpiresAt    sql.NullTime   `db:"expires_at"`
	RevokedAt    sql.NullTime   `db:"revoked_at"`
}

type keyRowNow struct {
	keyRow
	Now time.Time `db:"db_now"`
}

func (r *keyRow) toDomain() *apikey.Key {
	scopes := make([]apikey.Scope, len(r.Scopes))
	for i, s := range r.Scopes {
		scopes[i] = apikey.Scope(s)
	}
	return apikey.Restore(apikey.Snapshot{
		ID: r.ID, Name: r.Name, Hash: r.Hash, Scopes: scopes, Queues: []string(r.Queues),
		WorkerPrefix: r.WorkerPrefix.String, CreatedAt: r.CreatedAt, LastUsedAt: timePtr(r.LastUsedAt),
		ExpiresAt: timePtr(r.ExpiresAt), RevokedAt: timePtr(r.RevokedAt),
	})
}

// KeyStore implements ports.KeyStore on one transaction.
type KeyStore struct {
	st *txState
}

var _ ports.KeyStore = (*KeyStore)(nil)

// Create implements ports.KeyStore.
func (s *KeyStore) Create(ctx context.Context, fn ports.KeyCreateFunc) (*apikey.Key, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, err
	}
	k, events, err := fn(now)
	if err != nil {
		return nil, err
	}
	v := k.Snapshot()
	scopes := make(pq.StringArray, len(v.Scopes))
	for i, sc := range v.Scopes {
		scopes[i] = string(sc)
	}
	queues := pq.StringArray(v.Queues)
	if queues == nil {
		queues = pq.StringArray{}
	}
	var row keyRow
	err = s.st.tx.GetContext(ctx, &row, `
		INSERT INTO `+KeysTable+` (id, name, hash, scopes, queues, worker_prefix, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		RETURNING `+keyColumns,
		v.ID, v.Name, v.Hash, scopes, queues, nullString(v.WorkerPrefix), v.CreatedAt, v.ExpiresAt)
	if err != nil {
		return nil, fmt.Errorf("insert api key: %w", err)
	}
	s.st.Record(events...)
	return row.toDomain(), nil
}

// ByHash implements ports.KeyStore.
func (s *KeyStore) ByHash(ctx context.Context, hash []byte) (*apikey.Key, time.Time, error) {
	var row keyRowNow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+keyColumns+`, now() AS db_now FROM `+KeysTable+` WHERE hash = $1`, hash)
	if errors.Is(err, sql.ErrNoRows) {
		now, nerr := s.st.Now(ctx)
		if nerr != nil {
			return nil, time.Time{}, nerr
		}
		return nil, now, apikey.ErrUnknown
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("load api key: %w", err)
	}
	s.st.setNow(row.Now)
	return row.toDomain(), row.Now, nil
}

// Update implements ports.KeyStore.
func (s *KeyStore) Update(ctx context.Context, id uuid.UUID, fn ports.KeyUpdateFunc) (*apikey.Key, error) {
	var row keyRowNow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+keyColumns+`, now() AS db_now FROM `+KeysTable+` WHERE id = $1 FOR UPDATE`, id)
	if err != nil {
		return nil, notFound(err, apikey.ErrNotFound)
	}
	s.st.setNow(row.Now)
	k := row.toDomain()
	events, changed, err := fn(k, row.Now)
	if err != nil || !changed {
		return k, err
	}
	// Only revocation changes a key.
	if _, err := s.st.tx.ExecContext(ctx, `UPDATE `+KeysTable+` SET revoked_at = $2 WHERE id = $1`, id, k.Snapshot().RevokedAt); err != nil {
		return nil, fmt.Errorf("save api key: %w", err)
	}
	s.st.Record(events...)
	return k, nil
}

// List implements ports.KeyStore.
func (s *KeyStore) List(ctx context.Context) ([]*apikey.Key, error) {
	var rows []keyRow
	if err := s.st.tx.SelectContext(ctx, &rows, `SELECT `+keyColumns+` FROM `+KeysTable+` ORDER BY created_at, id`); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	out := make([]*apikey.Key, len(rows))
	for i := range rows {
		out[i] = rows[i].toDomain()
	}
	return out, nil
}

// MarkUsed implements ports.KeyStore.
func (s *KeyStore) MarkUsed(ctx context.Context, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.st.tx.ExecContext(ctx, `UPDATE `+KeysTable+` SET last_used_at = now() WHERE id = ANY($1::uuid[])`, uuidArray(ids)); err != nil {
		return fmt.Errorf("mark api keys used: %w", err)
	}
	return nil
}

// Usable implements ports.KeyStore.
func (s *KeyStore) Usable(ctx context.Context) (bool, error) {
	var ok bool
	err := s.st.tx.GetContext(ctx, &ok, `SELECT EXISTS (SELECT 1 FROM `+KeysTable+`
		WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()))`)
	if err != nil {
		return false, fmt.Errorf("look for usable api keys: %w", err)
	}
	return ok, nil
}
