package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// AdvisoryLocker implements ports.Locker with PostgreSQL session-level
// advisory locks. A held lock keeps its own connection out of the pool for
// as long as it is held: the lock lives exactly as long as that session, so
// when the process dies or the connection breaks, PostgreSQL releases it and
// another instance's next TryLock succeeds.
type AdvisoryLocker struct {
	db *sqlx.DB
}

var _ ports.Locker = (*AdvisoryLocker)(nil)

// NewAdvisoryLocker returns a Locker over db.
func NewAdvisoryLocker(db *sqlx.DB) *AdvisoryLocker { return &AdvisoryLocker{db: db} }

// LockKey is the pg_advisory_lock key of the lock called name: the 64-bit
// FNV-1a hash of "taskmaster:" + name.
func LockKey(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("taskmaster:" + name))
	return int64(h.Sum64())
}

// TryLock implements ports.Locker with pg_try_advisory_lock on a dedicated
// connection, which it keeps while the lock is held.
func (l *AdvisoryLocker) TryLock(ctx context.Context, name string) (ports.Lock, error) {
	key := LockKey(name)
	conn, err := l.db.Connx(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: get connection: %w", name, err)
	}
	var taken bool
	if err := conn.GetContext(ctx, &taken, `SELECT pg_try_advisory_lock($1)`, key); err != nil {
		discard(conn) // whether the lock was taken is unknown: never pool this session again
		_ = conn.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if !taken {
		_ = conn.Close()
		return nil, nil
	}
	return &advisoryLock{name: name, key: key, conn: conn}, nil
}

// advisoryLock is a held session advisory lock and its connection.
type advisoryLock struct {
	name string
	key  int64

	mu   sync.Mutex
	conn *sqlx.Conn // nil once released
}

// Check implements ports.Lock: the lock is held as long as its session
// answers (lib/pq's ping is a round trip to the server).
func (l *advisoryLock) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return fmt.Errorf("lock %s: released", l.name)
	}
	if err := l.conn.PingContext(ctx); err != nil {
		return fmt.Errorf("lock %s: session lost: %w", l.name, err)
	}
	return nil
}

// Release implements ports.Lock: it unlocks and returns the connection to
// the pool, or, when the unlock fails, closes the session (which releases
// the lock too).
func (l *advisoryLock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	conn := l.conn
	l.conn = nil
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	var released bool
	err := conn.GetContext(uctx, &released, `SELECT pg_advisory_unlock($1)`, l.key)
	if err == nil && !released {
		err = errors.New("the session did not hold it")
	}
	if err != nil {
		discard(conn)
	}
	_ = conn.Close()
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.name, err)
	}
	return nil
}
