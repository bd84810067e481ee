package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// maxTxAttempts bounds re-runs of a transaction that hit a deadlock or a
// serialization failure.
const maxTxAttempts = 3

// TxRunner runs use cases in PostgreSQL transactions and appends each
// transaction's events to the outbox in that same transaction.
type TxRunner struct {
	db     *sqlx.DB
	logger watermill.LoggerAdapter
	// opts begin every transaction (read-only ones for NewReadOnlyTxRunner).
	opts *sql.TxOptions
}

var _ ports.TxRunner = (*TxRunner)(nil)

// NewTxRunner returns a TxRunner over db.
func NewTxRunner(db *sqlx.DB) *TxRunner {
	return &TxRunner{db: db, logger: watermill.NopLogger{}}
}

// NewReadOnlyTxRunner returns a TxRunner over db whose transactions are
// read-only (BEGIN READ ONLY): the use cases that only read run on it against
// a read replica, or against the primary when it serves their reads, and a
// write that slipped into one fails instead of being made.
func NewReadOnlyTxRunner(db *sqlx.DB) *TxRunner {
	return &TxRunner{db: db, logger: watermill.NopLogger{}, opts: &sql.TxOptions{ReadOnly: true}}
}

// Run implements ports.TxRunner. A transaction that fails on a deadlock, a
// serialization failure or a race a store detected (errRaced) is run again
// (fn must not have effects outside it). Before it commits, the ends of the
// tasks it moved into DONE or DEAD are passed on to their dependants
// (settleDependants).
// Under a fence (ports.WithFence) the transaction begins by locking and
// renewing the job's lease row for that term (see fence).
// So is one whose BEGIN met a pooled connection that the server had closed
// (after a database restart every idle connection is such a one; nothing
// ran, and each try discards one of them), or whose write met a server that
// no longer takes writes (readOnlyServerError: demoted under a pooled
// connection; the connection is discarded and the next one goes to the
// primary), up to the pool's size.
// Connection failures come back marked with ports.ErrUnavailable
// (TranslateError), including a COMMIT whose connection broke: its outcome
// is unknown, so it must not be acknowledged as done.
func (r *TxRunner) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	var err error
	staleBudget := max(r.db.Stats().MaxOpenConnections, maxTxAttempts)
	for attempt := 1; attempt <= maxTxAttempts; {
		err = r.runOnce(ctx, fn)
		var (
			begin    *beginError
			readOnly *readOnlyServerError
		)
		if (errors.As(err, &begin) && isStaleConnection(begin.err) || errors.As(err, &readOnly)) && staleBudget > 0 {
			// Nothing of the transaction was committed: run it again on
			// another connection.
			staleBudget--
			continue
		}
		if !retryable(err) {
			break
		}
		attempt++
	}
	return TranslateError(err)
}

// beginError is a failure of BEGIN: nothing of the transaction ran.
type beginError struct{ err error }

func (e *beginError) Error() string { return "begin: " + e.err.Error() }
func (e *beginError) Unwrap() error { return e.err }

func (r *TxRunner) runOnce(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) (err error) {
	tx, err := r.db.BeginTxx(ctx, r.opts)
	if err != nil {
		return &beginError{err: err}
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	state := &txState{tx: tx}
	if f, ok := ports.FenceFrom(ctx); ok {
		if err := fence(ctx, state, f); err != nil {
			return err
		}
	}
	if err := fn(ctx, state.stores()); err != nil {
		return err
	}
	if err := state.settleDependants(ctx); err != nil {
		return err
	}
	if err := r.publish(ctx, tx, state.events); err != nil {
		return err
	}
	if err := state.sendNotifications(ctx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// publish appends the transaction's events as one outbox message through a
// Watermill SQL publisher bound to the transaction.
func (r *TxRunner) publish(ctx context.Context, tx *sqlx.Tx, events []event.Event) error {
	if len(events) == 0 {
		return nil
	}
	msg, err := envelope.NewMessage(ctx, events)
	if err != nil {
		return err
	}
	pub, err := wsql.NewPublisher(tx, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, r.logger)
	if err != nil {
		return fmt.Errorf("outbox publisher: %w", err)
	}
	if err := pub.Publish(envelope.Topic, msg); err != nil {
		return fmt.Errorf("append to outbox: %w", err)
	}
	return nil
}

// txState is what the stores of one transaction share.
type txState struct {
	tx     *sqlx.Tx
	now    time.Time
	hasNow bool
	events []event.Event
	// wake holds what this transaction made claimable, per queue (in
	// wakeOrder).
	wake      map[string]*queueWake
	wakeOrder []string
	// finished holds the tasks that a save of this transaction moved into
	// DONE or DEAD and that have dependants, until settleDependants passes
	// their ends on.
	finished []*task.Task
	// awaitedEnds are the awaited tasks this transaction moved into DONE
	// or DEAD (or purged): their ends are announced on FinishedChannel.
	awaitedEnds []uuid.UUID
	// plans are the plan settings pinned so far (pinPlans).
	plans planSettings
}

// notify counts a task this transaction made PENDING in queue with run_at
// runAt, to wake as many waiting claims when the transaction commits
// (again when it falls due, if later).
func (s *txState) notify(queue string, runAt time.Time) {
	s.queueWake(queue).add(runAt)
}

// notifyAll asks every claim waiting on queue to look again when the
// transaction commits (the queue was resumed or a limit loosened).
func (s *txState) notifyAll(queue string) {
	s.queueWake(queue).everyone = true
}

func (s *txState) queueWake(queue string) *queueWake {
	w := s.wake[queue]
	if w == nil {
		if s.wake == nil {
			s.wake = map[string]*queueWake{}
		}
		w = &queueWake{}
		s.wake[queue] = w
		s.wakeOrder = append(s.wakeOrder, queue)
	}
	return w
}

// sendNotifications queues one NOTIFY per queue (see wake.go), and the
// ends of awaited tasks (FinishedChannel); PostgreSQL delivers them only if
// and when the transaction commits, to every instance listening.
func (s *txState) sendNotifications(ctx context.Context) error {
	if len(s.awaitedEnds) > 0 {
		if _, err := s.tx.ExecContext(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`,
			FinishedChannel, finishedPayloads(s.awaitedEnds)); err != nil {
			return fmt.Errorf("notify finished tasks: %w", err)
		}
	}
	if len(s.wakeOrder) == 0 {
		return nil
	}
	var now time.Time // read only when a run_at must be compared with it
	for _, q := range s.wakeOrder {
		if w := s.wake[q]; len(w.later) > 0 && !w.everyone {
			var err error
			if now, err = s.Now(ctx); err != nil {
				return err
			}
			break
		}
	}
	payloads := make(pq.StringArray, len(s.wakeOrder))
	for i, q := range s.wakeOrder {
		payloads[i] = s.wake[q].payload(q, now)
	}
	if _, err := s.tx.ExecContext(ctx, `SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p`,
		NotifyChannel, payloads); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	return nil
}

func (s *txState) stores() ports.Stores {
	return ports.Stores{Tasks: &TaskStore{st: s}, Workers: &WorkerStore{st: s}, Outbox: s, Reaper: &ReaperStore{st: s}, Keys: &KeyStore{st: s},
		Schedules: &ScheduleStore{st: s}, Sessions: &SessionStore{st: s}, Bulk: &BulkStore{st: s}, QueueSettings: &QueueSettingsStore{st: s},
		Limits: &LimitStore{st: s}, Push: &PushStore{st: s},
		Workflows: &WorkflowStore{st: s}}
}

// Record implements ports.Outbox.
func (s *txState) Record(events ...event.Event) {
	s.events = append(s.events, events...)
}

// Now returns the transaction's database time (now(): the same for the
// whole transaction), reading it once.
func (s *txState) Now(ctx context.Context) (time.Time, error) {
	if s.hasNow {
		return s.now, nil
	}
	if err := s.tx.GetContext(ctx, &s.now, `SELECT now()`); err != nil {
		return time.Time{}, fmt.Errorf("read database time: %w", err)
	}
	s.hasNow = true
	return s.now, nil
}

// nowOf returns the now() that rows were read with, or the transaction's
// when there are none.
func (s *txState) nowOf(ctx context.Context, rows []taskRowNow) (time.Time, error) {
	if len(rows) == 0 {
		return s.Now(ctx)
	}
	s.setNow(rows[0].Now)
	return rows[0].Now, nil
}

// setNow remembers a now() that a query returned alongside its rows.
func (s *txState) setNow(t time.Time) {
	s.now, s.hasNow = t, true
}

// retryable reports whether a transaction that failed with err may simply be
// run again: it hit a deadlock or a serialization failure (rolled back), or
// a store found it raced with another transaction (errRaced).
func retryable(err error) bool {
	if errors.Is(err, errRaced) {
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return true
		}
	}
	return false
}

func isUniqueViolation(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "23505"
}

// notFound maps sql.ErrNoRows to the given domain error.
func notFound(err, domainErr error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return domainErr
	}
	return err
}
