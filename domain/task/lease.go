package task

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Leases: every claim gives the task a lease that runs out LeaseSeconds
// after it was taken. The holder keeps it alive by listing the task in its
// heartbeats (a renewal) or by extending it; a lease that runs out, or a
// task its worker's heartbeat no longer lists, is taken back.

// ValidateLeaseSeconds checks a lease length asked for in field.
func ValidateLeaseSeconds(field string, seconds int) error {
	var v validation.Errors
	CheckLeaseSeconds(&v, field, seconds)
	return v.Err()
}

// CheckLeaseSeconds adds to v when seconds is not a lease length.
func CheckLeaseSeconds(v *validation.Errors, field string, seconds int) {
	if seconds < MinLeaseSeconds || seconds > MaxLeaseSeconds {
		v.Add(field, fmt.Sprintf("must be between %d and %d", MinLeaseSeconds, MaxLeaseSeconds))
	}
}

// LeaseExpired reports whether the task's lease has run out at now: it is
// RUNNING and its lease_expires_at is not after now. The lease reaper's query
// encodes exactly this rule.
func (t *Task) LeaseExpired(now time.Time) bool {
	return t.s.Status == StatusRunning && t.s.LeaseExpiresAt != nil && !t.s.LeaseExpiresAt.After(now)
}

// ExpireLease takes back a RUNNING task whose lease has run out (the holder
// hung, or never learned of its claim and does not list its tasks). The
// attempt counts: PENDING again at once with reason lease_expired, or DEAD
// (see takeBack). The holder's later reports are refused: its lease is gone.
func (t *Task) ExpireLease(now time.Time) (event.Event, error) {
	if t.s.Status != StatusRunning {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusPending}
	}
	if !t.LeaseExpired(now) {
		return event.Event{}, ErrLeaseNotExpired
	}
	return t.takeBack(RequeueLeaseExpired, DeadLeaseExpired, now), nil
}

// ExtendParams identify the holder and the new lease length.
type ExtendParams struct {
	WorkerID string
	// LeaseID must be the current lease.
	LeaseID uuid.UUID
	// LeaseSeconds, when not nil, becomes the task's lease length; nil
	// keeps the length the task has (a renewal).
	LeaseSeconds *int
}

// ExtendLease sets the lease of a RUNNING task held by the worker under
// p.LeaseID to run out p.LeaseSeconds (or the task's lease length) after
// now. The new length is kept, so later renewals reuse it. It is not a
// transition: the status does not change and no event is produced.
func (t *Task) ExtendLease(p ExtendParams, now time.Time) error {
	if p.LeaseSeconds != nil {
		if err := ValidateLeaseSeconds("lease_seconds", *p.LeaseSeconds); err != nil {
			return err
		}
	}
	if err := t.fence(p.WorkerID, p.LeaseID, ""); err != nil {
		return err
	}
	if p.LeaseSeconds != nil {
		t.s.LeaseSeconds = *p.LeaseSeconds
	}
	t.s.LeaseExpiresAt = leaseEnd(now, t.s.LeaseSeconds)
	t.s.UpdatedAt = now
	return nil
}

// Holder is a worker and the lease under which it holds (or held) a task.
type Holder struct {
	WorkerID string
	LeaseID  uuid.UUID
}

// HeldBy reports whether the task is RUNNING under workerID and leaseID.
func (t *Task) HeldBy(workerID string, leaseID uuid.UUID) bool {
	return t.s.Status == StatusRunning && t.s.WorkerID == workerID && t.s.LeaseID == leaseID
}

// CancelRequested reports whether the task is RUNNING with an operator's
// cancel request pending: its holder should stop and fail it.
func (t *Task) CancelRequested() bool {
	return t.s.Status == StatusRunning && t.s.CancelRequestedAt != nil
}

// LeaseRef names a task and the lease its holder knows it under.
type LeaseRef struct {
	ID      uuid.UUID
	LeaseID uuid.UUID
}

// Listing is what a task-listing heartbeat says: the tasks its worker holds,
// each under the lease it knows. A task the worker holds that the listing
// does not name (under its current lease) is one the worker has lost track
// of: typically a claim whose response never reached it.
type Listing struct {
	workerID string
	held     map[uuid.UUID]uuid.UUID
	grace    time.Duration
	// inFlight are the request ids of the worker's claims whose answers it
	// had not received when it built the listing.
	inFlight map[string]bool
}

// NewListing returns the listing of workerID's heartbeat. grace is how old a
// claim must be before its absence from the listing counts: a claim younger
// than that may have committed after the worker built its list (the
// heartbeat interval).
func NewListing(workerID string, refs []LeaseRef, grace time.Duration) Listing {
	held := make(map[uuid.UUID]uuid.UUID, len(refs))
	for _, r := range refs {
		held[r.ID] = r.LeaseID
	}
	return Listing{workerID: workerID, held: held, grace: grace}
}

// WithClaimsInFlight returns the listing with the request ids of the
// worker's claims whose answers it was still waiting for when it built the
// listing: a task such a claim made RUNNING is missing from the listing
// because its answer had not arrived, not because the worker lost track of
// it, however old the claim (an answer delayed past the grace). The worker
// stops naming a claim once it has its answer (and then lists its tasks)
// or gives up on it (and then its tasks are orphans).
func (l Listing) WithClaimsInFlight(requestIDs []string) Listing {
	if len(requestIDs) == 0 {
		return l
	}
	l.inFlight = make(map[string]bool, len(requestIDs))
	for _, id := range requestIDs {
		l.inFlight[id] = true
	}
	return l
}

// Lists reports whether the listing names t under its current lease.
func (l Listing) Lists(t *Task) bool {
	lease, ok := l.held[t.s.ID]
	return ok && lease == t.s.LeaseID
}

// Lost returns the listed references that name no task the worker holds
// under that lease: held are the worker's RUNNING tasks as they are now
// (requeued, cancelled, finished, taken by another worker or lease, or
// deleted tasks are missing from it). Refs come back in listing order.
func (l Listing) Lost(refs []LeaseRef, held []*Task) []LeaseRef {
	holds := make(map[LeaseRef]bool, len(held))
	for _, t := range held {
		if t.HeldBy(l.workerID, t.s.LeaseID) {
			holds[LeaseRef{ID: t.s.ID, LeaseID: t.s.LeaseID}] = true
		}
	}
	out := []LeaseRef{}
	for _, r := range refs {
		if !holds[r] {
			out = append(out, r)
		}
	}
	return out
}

// Orphaned reports whether the listing shows its worker has lost track of
// t at now: t is RUNNING under the listing's worker, was claimed more than
// the grace before now, the listing does not name it under its current
// lease, and it was not made RUNNING by a claim the listing names as in
// flight.
func (t *Task) Orphaned(l Listing, now time.Time) bool {
	return t.s.Status == StatusRunning && t.s.WorkerID == l.workerID && !l.Lists(t) &&
		t.s.ClaimedAt != nil && t.s.ClaimedAt.Before(now.Add(-l.grace)) &&
		(t.s.ClaimRequestID == "" || !l.inFlight[t.s.ClaimRequestID])
}

// ReleaseOrphan takes back a task its worker's heartbeat shows it has lost
// track of (Orphaned). The attempt counts: PENDING again at once with reason
// orphaned, or DEAD (see takeBack).
func (t *Task) ReleaseOrphan(l Listing, now time.Time) (event.Event, error) {
	if t.s.Status != StatusRunning {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusPending}
	}
	if !t.Orphaned(l, now) {
		return event.Event{}, ErrNotOrphaned
	}
	return t.takeBack(RequeueOrphaned, DeadOrphaned, now), nil
}
