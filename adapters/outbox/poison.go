package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
)

// ErrPoisonNotFound is returned for a set-aside message that does not exist
// (or was replayed already).
var ErrPoisonNotFound = errors.New("no such set-aside outbox message")

// PoisonMessage is an outbox message set aside by one projection (a row of
// outbox_poison).
type PoisonMessage struct {
	ID         int64
	Projection string
	Position   Position
	// Events is how many events the message holds (-1: undecodable).
	Events     int
	Error      string
	Attempts   int
	SetAsideAt time.Time
}

// Poison lists and replays the messages the projections set aside. It works
// on the database alone, with or without a running service.
type Poison struct {
	db *sql.DB
}

// NewPoison returns the set-aside messages of db.
func NewPoison(db *sql.DB) *Poison { return &Poison{db: db} }

// List returns every set-aside message, oldest position first.
func (p *Poison) List(ctx context.Context) ([]PoisonMessage, error) {
	rows, err := p.db.QueryContext(ctx, `
		SELECT p.id, p.projection, p.transaction_id::text, p."offset", p.payload::text, p.error, p.attempts, p.set_aside_at
		FROM outbox_poison p ORDER BY p.transaction_id, p."offset", p.projection`)
	if err != nil {
		return nil, fmt.Errorf("list set-aside outbox messages: %w", err)
	}
	defer rows.Close()
	var out []PoisonMessage
	for rows.Next() {
		var (
			m       PoisonMessage
			payload []byte
		)
		if err := rows.Scan(&m.ID, &m.Projection, &m.Position.TransactionID, &m.Position.Offset, &payload,
			&m.Error, &m.Attempts, &m.SetAsideAt); err != nil {
			return nil, fmt.Errorf("list set-aside outbox messages: %w", err)
		}
		m.Events = -1
		if events, err := envelope.Decode(payload); err == nil {
			m.Events = len(events)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list set-aside outbox messages: %w", err)
	}
	return out, nil
}

// Replay applies the set-aside message id to its projection and deletes it,
// in one statement of one transaction: a message is replayed once, however
// many replays run at the same time. A replay that fails leaves the message
// set aside with its attempts counted and the new error, and returns the
// error.
func (p *Poison) Replay(ctx context.Context, id int64) error {
	err := p.replay(ctx, id)
	if err == nil || errors.Is(err, ErrPoisonNotFound) {
		return err
	}
	if _, uerr := p.db.ExecContext(ctx, `UPDATE outbox_poison SET attempts = attempts + 1, error = $2 WHERE id = $1`,
		id, err.Error()); uerr != nil {
		err = errors.Join(err, fmt.Errorf("record the failed replay: %w", uerr))
	}
	return fmt.Errorf("replay set-aside outbox message %d: %w", id, err)
}

func (p *Poison) replay(ctx context.Context, id int64) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// Wait for the projections' batch in flight, and make one that waits
	// behind this transaction start over (its REPEATABLE READ snapshot would
	// predate the replay's writes, and its writes fail to serialize).
	if _, err := tx.ExecContext(ctx, `
		UPDATE watermill_offsets_taskmaster_events SET offset_acked = offset_acked WHERE consumer_group = $1`,
		ProjectionsGroup); err != nil {
		return fmt.Errorf("lock the projections' consumer group: %w", err)
	}
	var (
		name    string
		payload []byte
	)
	err = tx.QueryRowContext(ctx, `SELECT projection, payload::text FROM outbox_poison WHERE id = $1 FOR UPDATE`, id).
		Scan(&name, &payload)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrPoisonNotFound
	}
	if err != nil {
		return err
	}
	pr, ok := projectionNamed(name)
	if !ok {
		return fmt.Errorf("unknown projection %q", name)
	}
	events, err := envelope.Decode(payload)
	if err != nil {
		return err
	}
	b := newBatch()
	b.add(Position{}, payload, events, nil)
	sum := newSummary(b.classes)
	sum.add(b.Messages[0].events)
	s := &statement{}
	guard := s.with(`DELETE FROM outbox_poison WHERE id = ` + s.arg(id) + ` RETURNING 1`)
	s.returning(guard)
	pr.write(sum, s, guard)
	var deleted int
	if err := tx.QueryRowContext(ctx, s.sql(), s.args...).Scan(&deleted); err != nil {
		return err
	}
	if deleted != 1 {
		return ErrPoisonNotFound
	}
	return tx.Commit()
}

// ReplayAll replays every set-aside message, oldest first, each on its own;
// it returns how many it replayed and the errors of those it could not.
func (p *Poison) ReplayAll(ctx context.Context) (int, error) {
	msgs, err := p.List(ctx)
	if err != nil {
		return 0, err
	}
	var (
		n    int
		errs []error
	)
	for _, m := range msgs {
		switch err := p.Replay(ctx, m.ID); {
		case err == nil:
			n++
		case errors.Is(err, ErrPoisonNotFound): // replayed meanwhile
		default:
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// Discard deletes the set-aside message id without applying it (for a
// message no fix can make applicable, such as an undecodable one).
func (p *Poison) Discard(ctx context.Context, id int64) error {
	res, err := p.db.ExecContext(ctx, `DELETE FROM outbox_poison WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("discard set-aside outbox message %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrPoisonNotFound
	}
	return nil
}
