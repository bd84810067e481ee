package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// SessionsTable holds the dashboard sessions (their token digests).
const SessionsTable = "ui_sessions"

// SessionStore implements ports.SessionStore on one transaction.
type SessionStore struct {
	st *txState
}

var _ ports.SessionStore = (*SessionStore)(nil)

type sessionRow struct {
	ID        uuid.UUID `db:"id"`
	KeyID     uuid.UUID `db:"key_id"`
	CSRF      string    `db:"csrf"`
	CreatedAt time.Time `db:"created_at"`
	ExpiresAt time.Time `db:"expires_at"`
}

func (r *sessionRow) toDomain() *apikey.Session {
	return &apikey.Session{ID: r.ID, KeyID: r.KeyID, CSRF: r.CSRF, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt}
}

// Create implements ports.SessionStore.
func (s *SessionStore) Create(ctx context.Context, p ports.SessionCreateParams) (*apikey.Session, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	var row sessionRow
	err = s.st.tx.GetContext(ctx, &row, `
		INSERT INTO `+SessionsTable+` (id, hash, key_id, csrf, created_at, expires_at)
		VALUES ($1, $2, $3, $4, now(), now() + $5 * interval '1 microsecond')
		RETURNING id, key_id, csrf, created_at, expires_at`,
		id, p.Hash, p.KeyID, p.CSRF, p.TTL.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}
	return row.toDomain(), nil
}

// ByHash implements ports.SessionStore: one query reads the session and
// its key.
func (s *SessionStore) ByHash(ctx context.Context, hash []byte) (*apikey.Session, *apikey.Key, time.Time, error) {
	var row struct {
		Session sessionRow `db:"s"`
		keyRow
		Now time.Time `db:"db_now"`
	}
	err := s.st.tx.GetContext(ctx, &row, `
		SELECT s.id AS "s.id", s.key_id AS "s.key_id", s.csrf AS "s.csrf", s.created_at AS "s.created_at",
			s.expires_at AS "s.expires_at", `+prefixed("k.", keyColumns)+`, now() AS db_now
		FROM `+SessionsTable+` s JOIN `+KeysTable+` k ON k.id = s.key_id
		WHERE s.hash = $1`, hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil, time.Time{}, apikey.ErrSessionUnknown
	}
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("load session: %w", err)
	}
	return row.Session.toDomain(), row.keyRow.toDomain(), row.Now, nil
}

// Delete implements ports.SessionStore.
func (s *SessionStore) Delete(ctx context.Context, hash []byte) error {
	if _, err := s.st.tx.ExecContext(ctx, `DELETE FROM `+SessionsTable+` WHERE hash = $1`, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpired implements ports.SessionStore.
func (s *SessionStore) DeleteExpired(ctx context.Context, limit int) (int, error) {
	res, err := s.st.tx.ExecContext(ctx, `
		DELETE FROM `+SessionsTable+` WHERE id IN (
			SELECT id FROM `+SessionsTable+` WHERE expires_at <= now() ORDER BY expires_at LIMIT $1
			FOR UPDATE SKIP LOCKED)`, limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
