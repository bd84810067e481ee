package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lib/pq"
	"go.uber.org/zap"
)

// errPositionMoved reports that a projection's position was not where the
// batch found it: another transaction moved it. The batch is applied again
// (a redelivery finds the new position and skips what was applied).
var errPositionMoved = errors.New("projection position moved concurrently")

// Projector applies batches of outbox messages to the projections, on the
// consumer group's transaction, exactly once per message and projection:
//
//   - Each projection has a position (projector_positions). A batch is
//     applied, for each projection, from the messages after its position,
//     with its deltas aggregated in memory and written with one statement per
//     table, all tables and the positions' advance in one statement. Only
//     the position the batch started from may be advanced (compare and set),
//     so a batch redelivered after its ack deadline is never applied twice.
//   - Each attempt runs in a savepoint: a failed one leaves nothing behind,
//     and the transaction stays usable for the next.
//   - A message whose payload cannot be decoded is set aside at once.
//   - A batch that fails with an error bad data can cause (a data exception,
//     a constraint violation) is split in halves,
//     recursively, until the failing messages are alone. A message that
//     fails alone for a projection PoisonAttempts times is set aside in
//     outbox_poison (in the statement that advances the projection past it),
//     logged and counted; the projection goes on. Other errors (connection,
//     cancellation, serialization) return: the batch is delivered again.
type Projector struct {
	projections []projection
	attempts    int
	logger      *zap.Logger

	// hooks lets tests act inside an attempt's savepoint.
	hooks hooks
}

// hooks run inside the savepoint of each attempt, around its statement.
type hooks struct {
	before func(ctx context.Context, tx *sql.Tx, msgs []Message) error
	after  func(ctx context.Context, tx *sql.Tx, msgs []Message) error
}

// NewProjector returns the projector of the built-in projections.
func NewProjector(cfg Config, logger *zap.Logger) *Projector {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Projector{projections: projections(), attempts: cfg.PoisonAttempts, logger: logger}
}

// Apply applies batch b on tx. It returns nil once every message is applied
// to, or set aside by, every projection.
func (p *Projector) Apply(ctx context.Context, tx *sql.Tx, b *Batch) error {
	positions, err := readPositions(ctx, tx, p.projections)
	if err != nil {
		return err
	}
	a := &batchRun{Projector: p, tx: tx, classes: b.classes, positions: positions}
	return a.applyOrSplit(ctx, b.Messages)
}

// batchRun is the application of one batch: the positions as it moves
// them.
type batchRun struct {
	*Projector
	tx        *sql.Tx
	classes   *classTable
	positions map[string]Position
}

// applyOrSplit applies msgs in one attempt or, when that fails with an error
// bad data can cause, each half on its own, down to single messages.
func (a *batchRun) applyOrSplit(ctx context.Context, msgs []Message) error {
	err := a.attempt(ctx, msgs, a.projections, nil)
	switch {
	case err == nil:
		return nil
	case !poisonable(err):
		return err
	case len(msgs) == 1:
		return a.isolate(ctx, msgs[0])
	}
	mid := len(msgs) / 2
	if err := a.applyOrSplit(ctx, msgs[:mid]); err != nil {
		return err
	}
	return a.applyOrSplit(ctx, msgs[mid:])
}

// isolate applies a message that failed in a batch, one projection at a
// time, PoisonAttempts times; it sets the message aside for each projection
// it keeps failing.
func (a *batchRun) isolate(ctx context.Context, m Message) error {
	for _, pr := range a.projections {
		if !a.due(pr, m) {
			continue
		}
		var err error
		attempts := 0
		for attempts < a.attempts {
			attempts++
			if err = a.attempt(ctx, []Message{m}, []projection{pr}, nil); err == nil || !poisonable(err) {
				break
			}
		}
		switch {
		case err == nil:
			continue
		case !poisonable(err):
			return err
		}
		if err := a.attempt(ctx, []Message{m}, []projection{pr}, &poison{err: err, attempts: attempts}); err != nil {
			return fmt.Errorf("set aside outbox message %s for %s: %w", m.Position, pr.name, err)
		}
	}
	return nil
}

// poison asks an attempt to set its one message aside instead of applying
// it.
type poison struct {
	err      error
	attempts int
}

// due reports whether m is after pr's position.
func (a *batchRun) due(pr projection, m Message) bool {
	return a.positions[pr.name].Less(m.Position)
}

// attempt applies msgs to prs (or, with set, sets its one message aside)
// with one statement, in a savepoint. Undecodable messages are set aside at
// once: retrying cannot decode them.
func (a *batchRun) attempt(ctx context.Context, msgs []Message, prs []projection, set *poison) (err error) {
	s := &statement{}
	advanced := map[string]Position{}
	var guards []string
	type asideNote struct {
		projection, reason string
		pos                Position
		attempts           int
	}
	var setAside []asideNote
	for _, pr := range prs {
		from := a.positions[pr.name]
		var (
			last    Position
			aside   []Message
			reasons []string
			tries   []int
			sum     = newSummary(a.classes)
		)
		for _, m := range msgs {
			if !from.Less(m.Position) {
				continue
			}
			last = m.Position
			switch {
			case set != nil:
				aside, reasons, tries = append(aside, m), append(reasons, set.err.Error()), append(tries, set.attempts)
			case m.DecodeErr != nil:
				aside, reasons, tries = append(aside, m), append(reasons, m.DecodeErr.Error()), append(tries, 1)
			default:
				sum.add(m.events)
			}
		}
		if last == (Position{}) {
			continue // nothing after this projection's position
		}
		guard := s.with(`INSERT INTO projector_positions AS p (projection, transaction_id, "offset", applied_at)
VALUES (` + s.arg(pr.name) + `, ` + s.arg(xid(last)) + `::xid8, ` + s.arg(last.Offset) + `, clock_timestamp())
ON CONFLICT (projection) DO UPDATE
SET transaction_id = excluded.transaction_id, "offset" = excluded."offset", applied_at = excluded.applied_at
WHERE (p.transaction_id, p."offset") = (` + s.arg(xid(from)) + `::xid8, ` + s.arg(from.Offset) + `::bigint)
RETURNING 1`)
		s.returning(guard)
		guards = append(guards, pr.name)
		advanced[pr.name] = last
		pr.write(sum, s, guard)
		if len(aside) > 0 {
			writePoison(s, guard, pr.name, aside, reasons, tries)
			for i, m := range aside {
				setAside = append(setAside, asideNote{pr.name, reasons[i], m.Position, tries[i]})
			}
		}
	}
	if s.empty() {
		return nil
	}

	if _, err := a.tx.ExecContext(ctx, `SAVEPOINT projection_attempt`); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	defer func() {
		if err == nil {
			if _, err = a.tx.ExecContext(ctx, `RELEASE SAVEPOINT projection_attempt`); err != nil {
				err = fmt.Errorf("release savepoint: %w", err)
			}
		}
		if err != nil {
			// The attempt's context may be what failed it; the rollback must still run.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rbErr := a.tx.ExecContext(rctx, `ROLLBACK TO SAVEPOINT projection_attempt`); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
			}
			return
		}
		for name, pos := range advanced {
			a.positions[name] = pos
		}
		for _, sa := range setAside {
			a.logger.Error("outbox message set aside: its projection cannot apply it; replay it with `taskmaster outbox poison replay` once fixed",
				zap.String("projection", sa.projection), zap.Uint64("transaction_id", sa.pos.TransactionID),
				zap.Int64("offset", sa.pos.Offset), zap.Int("attempts", sa.attempts), zap.String("error", sa.reason))
		}
	}()
	if a.hooks.before != nil {
		if err := a.hooks.before(ctx, a.tx, msgs); err != nil {
			return err
		}
	}
	counts := make([]int, len(guards))
	dest := make([]any, len(guards))
	for i := range counts {
		dest[i] = &counts[i]
	}
	if err := a.tx.QueryRowContext(ctx, s.sql(), s.args...).Scan(dest...); err != nil {
		return fmt.Errorf("apply outbox messages %s..%s: %w", msgs[0].Position, msgs[len(msgs)-1].Position, err)
	}
	for i, n := range counts {
		if n != 1 {
			return fmt.Errorf("%s: %w", guards[i], errPositionMoved)
		}
	}
	if a.hooks.after != nil {
		return a.hooks.after(ctx, a.tx, msgs)
	}
	return nil
}

// writePoison adds the expression that sets msgs aside for projection.
func writePoison(s *statement, guard, projection string, msgs []Message, reasons []string, attempts []int) {
	txs, payloads := make([]string, len(msgs)), make([]string, len(msgs))
	offsets := make([]int64, len(msgs))
	for i, m := range msgs {
		txs[i], offsets[i], payloads[i] = xid(m.Position), m.Position.Offset, string(m.Payload)
	}
	s.with(`INSERT INTO outbox_poison (projection, transaction_id, "offset", payload, error, attempts)
SELECT ` + s.arg(projection) + `, t::xid8, o, p::json, e, n
FROM unnest(` + s.arg(pq.StringArray(txs)) + `::text[], ` + s.arg(pq.Int64Array(offsets)) + `::bigint[], ` +
		s.arg(pq.StringArray(payloads)) + `::text[], ` + s.arg(pq.StringArray(reasons)) + `::text[], ` +
		s.arg(ints(attempts).array) + `::integer[]) AS aside (t, o, p, e, n)
WHERE EXISTS (SELECT FROM ` + guard + `)
ON CONFLICT (projection, transaction_id, "offset") DO NOTHING`)
}

// readPositions reads the projections' positions (zero for one without a
// row yet).
func readPositions(ctx context.Context, tx *sql.Tx, prs []projection) (map[string]Position, error) {
	names := make([]string, len(prs))
	for i, pr := range prs {
		names[i] = pr.name
	}
	rows, err := tx.QueryContext(ctx, `
		SELECT projection, transaction_id::text, "offset" FROM projector_positions WHERE projection = ANY ($1)`,
		pq.StringArray(names))
	if err != nil {
		return nil, fmt.Errorf("read projection positions: %w", err)
	}
	defer rows.Close()
	out := make(map[string]Position, len(prs))
	for rows.Next() {
		var (
			name string
			pos  Position
		)
		if err := rows.Scan(&name, &pos.TransactionID, &pos.Offset); err != nil {
			return nil, fmt.Errorf("read projection positions: %w", err)
		}
		out[name] = pos
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read projection positions: %w", err)
	}
	return out, nil
}

// poisonable reports whether err may come from the data of the messages
// applied, rather than from the database or the connection: a data exception
// (class 22: a value out of range, a NUL byte in a text, ...), an integrity
// constraint violation (class 23) or a program limit (class 54: an index row
// too large, ...). Only such failures set a message aside; anything else is
// retried, however often it happens.
func poisonable(err error) bool {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return false
	}
	switch pqErr.Code.Class() {
	case "22", "23", "54":
		return true
	}
	return false
}

// xid is a position's transaction id as a text parameter (xid8 has no
// binary form lib/pq knows).
func xid(p Position) string { return strconv.FormatUint(p.TransactionID, 10) }
