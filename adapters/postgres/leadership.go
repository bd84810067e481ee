package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/ports"
)

// LeaderLeasesTable holds one leadership lease per background job
// (migrations/0005_leadership.sql).
const LeaderLeasesTable = "leader_leases"

// leaseColumns are the columns of leaseRow, in order.
const leaseColumns = `job, owner, term, expires_at, acquired_at, renewed_at`

type leaseRow struct {
	Job        string    `db:"job"`
	Owner      string    `db:"owner"`
	Term       int64     `db:"term"`
	ExpiresAt  time.Time `db:"expires_at"`
	AcquiredAt time.Time `db:"acquired_at"`
	RenewedAt  time.Time `db:"renewed_at"`
	Now        time.Time `db:"db_now"`
}

func (r *leaseRow) toDomain() *leadership.Lease {
	return leadership.Restore(leadership.Snapshot{
		Job: r.Job, Owner: r.Owner, Term: r.Term, ExpiresAt: r.ExpiresAt, AcquiredAt: r.AcquiredAt, RenewedAt: r.RenewedAt,
	})
}

// seedLeaseSQL creates a job's lease row, vacant and locked by the
// inserting transaction, the first time any instance asks for it. It returns
// no row when another instance's insert came first. It is run only when the
// row does not exist: an insert that conflicts with a row whose latest
// version is not committed waits for that transaction, and the leader's
// fenced batches update the row.
const seedLeaseSQL = `
	INSERT INTO ` + LeaderLeasesTable + ` (` + leaseColumns + `)
	VALUES ($1, '', 0, 'epoch', 'epoch', 'epoch')
	ON CONFLICT (job) DO NOTHING
	RETURNING ` + leaseColumns + `, now() AS db_now`

const leaseExistsSQL = `SELECT EXISTS (SELECT 1 FROM ` + LeaderLeasesTable + ` WHERE job = $1)`

// lockLeaseSQL reads and locks a job's lease row. The lock is FOR NO KEY
// UPDATE: it conflicts with itself (one transaction at a time decides about
// a lease) and lets nothing else wait.
const lockLeaseSQL = `SELECT ` + leaseColumns + `, now() AS db_now FROM ` + LeaderLeasesTable + ` WHERE job = $1 FOR NO KEY UPDATE`

const saveLeaseSQL = `
	UPDATE ` + LeaderLeasesTable + ` SET owner = $2, term = $3, expires_at = $4, acquired_at = $5, renewed_at = $6
	WHERE job = $1`

// saveLease writes l's state.
func saveLease(ctx context.Context, tx *sqlx.Tx, l *leadership.Lease) error {
	v := l.Snapshot()
	if _, err := tx.ExecContext(ctx, saveLeaseSQL, v.Job, v.Owner, v.Term, v.ExpiresAt, v.AcquiredAt, v.RenewedAt); err != nil {
		return fmt.Errorf("save lease of %s: %w", v.Job, err)
	}
	return nil
}

// Elector implements ports.Elector with the leader_leases table. Each call
// is one short transaction; nothing is held between calls, so it works
// through any connection pooler and a leader's death needs no session to
// end: its lease simply expires.
type Elector struct {
	db    *sqlx.DB
	owner string
	ttl   time.Duration
}

var _ ports.Elector = (*Elector)(nil)

// NewElector returns the elector of the instance called owner (unique among
// every instance that ever runs: see NewInstanceID), whose leases last ttl.
func NewElector(db *sqlx.DB, owner string, ttl time.Duration) *Elector {
	return &Elector{db: db, owner: owner, ttl: ttl}
}

// NewInstanceID returns a name for this process that no other instance has
// or had: host name, process id and 48 random bits.
func NewInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	random := make([]byte, 6)
	_, _ = rand.Read(random) // never fails
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(random))
}

// Owner returns the instance name the elector leads as.
func (e *Elector) Owner() string { return e.owner }

// TTL implements ports.Elector.
func (e *Elector) TTL() time.Duration { return e.ttl }

// Lead implements ports.Elector: in one transaction it locks the job's row
// without waiting (a row in use is ErrLeaseBusy; a missing one is seeded),
// lets the domain decide (renew our lease, take an expired one over, or
// leave another instance's) and saves.
func (e *Elector) Lead(ctx context.Context, job string) (f ports.Fence, ok bool, err error) {
	err = e.inTx(ctx, func(tx *sqlx.Tx) error {
		row, err := lockOrSeedLease(ctx, tx, job)
		if err != nil {
			return err
		}
		l := row.toDomain()
		if _, err := l.Acquire(e.owner, e.ttl, row.Now); err != nil {
			if errors.Is(err, leadership.ErrHeld) {
				return nil
			}
			return err
		}
		if err := saveLease(ctx, tx, l); err != nil {
			return err
		}
		f, ok = ports.Fence{Job: job, Owner: e.owner, Term: l.Term(), TTL: e.ttl}, true
		return nil
	})
	if err != nil {
		return ports.Fence{}, false, fmt.Errorf("lead %s: %w", job, err)
	}
	return f, ok, nil
}

// lockOrSeedLease locks job's lease row without waiting, creating it if
// there is none; ErrLeaseBusy when another transaction holds it.
func lockOrSeedLease(ctx context.Context, tx *sqlx.Tx, job string) (leaseRow, error) {
	var row leaseRow
	err := tx.GetContext(ctx, &row, lockLeaseSQL+` SKIP LOCKED`, job)
	if err == nil {
		return row, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return row, fmt.Errorf("lock lease: %w", err)
	}
	var exists bool
	if err := tx.GetContext(ctx, &exists, leaseExistsSQL, job); err != nil {
		return row, fmt.Errorf("look for lease: %w", err)
	}
	if exists {
		return row, ports.ErrLeaseBusy
	}
	if err := tx.GetContext(ctx, &row, seedLeaseSQL, job); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return row, ports.ErrLeaseBusy // another instance seeded it just now
		}
		return row, fmt.Errorf("seed lease: %w", err)
	}
	return row, nil
}

// Release implements ports.Elector.
func (e *Elector) Release(ctx context.Context, f ports.Fence) error {
	err := e.inTx(ctx, func(tx *sqlx.Tx) error {
		var row leaseRow
		if err := tx.GetContext(ctx, &row, lockLeaseSQL, f.Job); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			return fmt.Errorf("lock lease: %w", err)
		}
		l := row.toDomain()
		if err := l.Release(f.Owner, f.Term, row.Now); err != nil {
			return nil // over already
		}
		return saveLease(ctx, tx, l)
	})
	if err != nil {
		return fmt.Errorf("release %s term %d: %w", f.Job, f.Term, err)
	}
	return nil
}

func (e *Elector) inTx(ctx context.Context, fn func(tx *sqlx.Tx) error) error {
	tx, err := e.db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// fence renews f's term in the transaction of st, before anything else it
// does, and keeps the lease row locked until that transaction ends: a
// takeover (Lead of another instance) cannot commit meanwhile, and once it
// has, this fails. It waits for the row while another transaction holds it
// (another instance's Lead: a moment; a frozen one's: until the server ends
// its idle session).
func fence(ctx context.Context, st *txState, f ports.Fence) error {
	var row leaseRow
	if err := st.tx.GetContext(ctx, &row, lockLeaseSQL, f.Job); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("fence %s term %d: no lease: %w", f.Job, f.Term, leadership.ErrLost)
		}
		return fmt.Errorf("fence %s term %d: %w", f.Job, f.Term, err)
	}
	st.setNow(row.Now)
	l := row.toDomain()
	if err := l.Renew(f.Owner, f.Term, f.TTL, row.Now); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return saveLease(ctx, st.tx, l)
}
