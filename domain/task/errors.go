package task

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
)

var (
	// ErrNotFound: no task has the given id.
	ErrNotFound = errors.New("task not found")
	// ErrWorkflowNotFound: no task (that the caller may see) belongs to
	// the run with the given id.
	ErrWorkflowNotFound = errors.New("workflow not found")
	// ErrLeaseLost: the caller does not hold the task (another worker holds
	// it, or the lease id is stale). Every *LeaseError matches it.
	ErrLeaseLost = errors.New("lease lost")
	// ErrNotClaimable: the task is PENDING but not claimable by this worker
	// now (run_at in the future, deadline passed, or tags not a subset).
	ErrNotClaimable = errors.New("task not claimable")
	// ErrDeadlineNotPassed: deadline expiry was asked of a task whose
	// deadline has not passed.
	ErrDeadlineNotPassed = errors.New("deadline has not passed")
	// ErrLeaseNotExpired: lease expiry was asked of a task whose lease has
	// not run out.
	ErrLeaseNotExpired = errors.New("lease has not expired")
	// ErrNotOrphaned: an orphan release was asked of a task its worker's
	// heartbeat listed, or that it claimed too recently to be missing from
	// the list, or that it does not hold.
	ErrNotOrphaned = errors.New("task is not orphaned")
	// ErrNotTimedOut: a timeout was asked of a task whose running attempt
	// has no time limit or has not used it up.
	ErrNotTimedOut = errors.New("task has not timed out")
)

// TransitionError is an illegal transition: the task's current status does
// not allow the requested change.
type TransitionError struct {
	// ID is the task.
	ID uuid.UUID
	// From is the task's current status.
	From Status
	// To is the status asked for (empty when it depended on the outcome).
	To Status
}

// Error implements error.
func (e *TransitionError) Error() string {
	if e.To == "" {
		return fmt.Sprintf("task %s is %s", e.ID, e.From)
	}
	return fmt.Sprintf("task %s is %s and cannot move to %s", e.ID, e.From, e.To)
}

// LeaseError: the task is RUNNING but the caller is not its holder, or holds
// a stale lease. It matches ErrLeaseLost.
type LeaseError struct {
	// ID is the task.
	ID uuid.UUID
	// Status is the task's current status.
	Status Status
}

// Error implements error.
func (e *LeaseError) Error() string {
	return fmt.Sprintf("task %s is %s under another worker or lease", e.ID, e.Status)
}

// Is makes errors.Is(err, ErrLeaseLost) true.
func (e *LeaseError) Is(target error) bool { return target == ErrLeaseLost }

// UniqueKeyError: the change would give the task an unfinished status while
// another unfinished task of its queue holds its unique key (an operator's
// retry of a DEAD task whose key was taken meanwhile).
type UniqueKeyError struct {
	// ID is the task.
	ID uuid.UUID
	// Queue and Key are the unique key that is taken.
	Queue, Key string
}

// Error implements error.
func (e *UniqueKeyError) Error() string {
	return fmt.Sprintf("task %s: another unfinished task of queue %s holds unique key %q", e.ID, e.Queue, e.Key)
}
