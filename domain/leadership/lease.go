// Package leadership holds the rule of the background jobs' leadership: a
// lease per job, held by one owner (an instance) at a time in a numbered
// term, until it expires on the database clock. It imports only the standard
// library.
package leadership

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrHeld: another owner holds the lease and it has not expired.
	ErrHeld = errors.New("another instance leads")
	// ErrLost: the caller's term is over (the lease has another owner or a
	// later term).
	ErrLost = errors.New("leadership lost")
)

// Snapshot is the state of a lease, for storage.
type Snapshot struct {
	// Job names the background job led.
	Job string
	// Owner is the instance that holds (or last held) the lease.
	Owner string
	// Term counts the changes of owner: 0 before the first, then 1, 2, ...
	Term int64
	// ExpiresAt is when the lease runs out unless renewed.
	ExpiresAt time.Time
	// AcquiredAt is when the term began.
	AcquiredAt time.Time
	// RenewedAt is when the lease was last renewed.
	RenewedAt time.Time
}

// Lease is the leadership of one job. Its methods take the database's now.
type Lease struct {
	s Snapshot
}

// Vacant returns the lease of a job that nobody has led yet: term 0, expired.
func Vacant(job string) *Lease { return &Lease{s: Snapshot{Job: job}} }

// Restore rebuilds a lease from storage.
func Restore(s Snapshot) *Lease { return &Lease{s: s} }

// Snapshot returns the lease's state.
func (l *Lease) Snapshot() Snapshot { return l.s }

// Term returns the lease's current term.
func (l *Lease) Term() int64 { return l.s.Term }

// Expired reports whether the lease has run out at now.
func (l *Lease) Expired(now time.Time) bool { return !l.s.ExpiresAt.After(now) }

// HeldBy reports whether owner holds the lease in term (expired or not:
// nobody else can have led since, or the term would have changed).
func (l *Lease) HeldBy(owner string, term int64) bool {
	return term > 0 && l.s.Owner == owner && l.s.Term == term
}

// Acquire gives the lease to owner until now + ttl. Owner's own lease is
// renewed in its term; an expired lease of another owner (or a vacant one)
// is taken over in the next term. Otherwise it is ErrHeld and nothing
// changes. It reports whether a new term began.
func (l *Lease) Acquire(owner string, ttl time.Duration, now time.Time) (bool, error) {
	if err := checkTTL(ttl); err != nil {
		return false, err
	}
	switch {
	case l.s.Term > 0 && l.s.Owner == owner:
		l.renew(ttl, now)
		return false, nil
	case l.Expired(now):
		l.s.Owner = owner
		l.s.Term++
		l.s.AcquiredAt = now
		l.renew(ttl, now)
		return true, nil
	default:
		return false, fmt.Errorf("%s: %w until %s", l.s.Owner, ErrHeld, l.s.ExpiresAt.Format(time.RFC3339Nano))
	}
}

// Renew extends owner's term until now + ttl; ErrLost when the term is over.
func (l *Lease) Renew(owner string, term int64, ttl time.Duration, now time.Time) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if !l.HeldBy(owner, term) {
		return l.lost(owner, term)
	}
	l.renew(ttl, now)
	return nil
}

// Release ends owner's term at now: the lease expires at once, so that any
// instance may take over. ErrLost when the term is already over.
func (l *Lease) Release(owner string, term int64, now time.Time) error {
	if !l.HeldBy(owner, term) {
		return l.lost(owner, term)
	}
	l.s.ExpiresAt, l.s.RenewedAt = now, now
	return nil
}

func (l *Lease) renew(ttl time.Duration, now time.Time) {
	l.s.ExpiresAt, l.s.RenewedAt = now.Add(ttl), now
}

func (l *Lease) lost(owner string, term int64) error {
	return fmt.Errorf("%s term %d of %s: %w (now %s term %d)", owner, term, l.s.Job, ErrLost, l.s.Owner, l.s.Term)
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return errors.New("lease ttl must be positive")
	}
	return nil
}
