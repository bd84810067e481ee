package ports

import (
	"context"
	"errors"
	"time"
)

// Fence is one term of one background job's leadership: the instance that
// leads (Owner), in which term, and how long its lease lasts unrenewed.
// Background cycles run with their fence in the context (WithFence); every
// transaction TxRunner runs under it first renews that term's lease in the
// same transaction, or fails with an error matching leadership.ErrLost when
// the term is over, so that a former leader that wakes up (after a freeze,
// a pause, a partition) commits nothing. The zero Fence fences nothing.
type Fence struct {
	// Job names the background job.
	Job string
	// Owner names the leading instance.
	Owner string
	// Term is the lease's term the owner leads in (1 or more).
	Term int64
	// TTL is how long each renewal keeps the lease.
	TTL time.Duration
}

// Valid reports whether f names a term.
func (f Fence) Valid() bool { return f.Term > 0 }

type fenceKey struct{}

// WithFence returns ctx carrying f: transactions run with it are fenced by f.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence ctx carries, if it carries a valid one.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, _ := ctx.Value(fenceKey{}).(Fence)
	return f, f.Valid()
}

// ErrLeaseBusy: another transaction holds the job's lease row at this moment
// (the leader's fenced batch, or another instance's Lead); try again later.
var ErrLeaseBusy = errors.New("leadership lease busy")

// Elector hands the leadership of each background job to one instance at a
// time, through a lease per job that expires on the database clock unless
// its owner renews it. It needs no database session to last: a frozen or
// vanished leader loses the lead when its lease expires.
type Elector interface {
	// Lead takes or renews this instance's lease of job. It returns the
	// fence of the term this instance leads in, or ok false while another
	// instance holds an unexpired lease (ErrLeaseBusy while the lease is
	// in use; the caller's previous state then stands).
	Lead(ctx context.Context, job string) (f Fence, ok bool, err error)
	// Release ends term f at once (its lease expires now), so that another
	// instance can take over at its next attempt. A term already over is
	// not an error.
	Release(ctx context.Context, f Fence) error
	// TTL is how long a lease lasts unrenewed.
	TTL() time.Duration
}
