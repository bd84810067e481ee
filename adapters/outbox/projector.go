package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
)

// Consumer groups of the built-in projectors. The migrations create their
// offsets rows, so the janitor waits for them from the start.
const (
	QueueStatsGroup = "queue_stats"
	MetricsGroup    = "metrics"
)

var posInf = math.Inf(1)

// Projector turns outbox messages into table writes. Each projector has its
// own consumer group; Apply runs on the subscriber's transaction, inside a
// savepoint the router opens for each attempt.
type Projector struct {
	group   string
	project func(events []event.Event) []upsert
}

// ConsumerGroup returns the projector's watermill-sql consumer group.
func (p *Projector) ConsumerGroup() string { return p.group }

// Apply applies the events of the message at pos, in one statement: it
// advances the projector's position and, only when pos is past the position
// (so a redelivered message is never applied twice), adds the message's
// deltas to the tables. It reports whether the message was applied.
//
// Being one statement, it is applied entirely or not at all even if the
// subscriber's transaction ends concurrently (watermill-sql commits a batch
// when a message's ack deadline passes, whether or not its handler is done).
func (p *Projector) Apply(ctx context.Context, tx *sql.Tx, pos Position, events []event.Event) (bool, error) {
	query, args := applyStatement(p.group, pos, p.project(events))
	var applied int
	if err := tx.QueryRowContext(ctx, query, args...).Scan(&applied); err != nil {
		return false, fmt.Errorf("apply outbox message %d/%d for %s: %w", pos.TransactionID, pos.Offset, p.group, err)
	}
	return applied == 1, nil
}

// upsert adds values to rows of one table: INSERT ... ON CONFLICT (keys) DO
// UPDATE SET value = value + excluded.value.
type upsert struct {
	table string
	// keys are the key columns with their SQL types.
	keys []column
	// value is the column added to, with its SQL type.
	value column
	// rows holds the key values then the value of each row.
	rows [][]any
}

type column struct{ name, typ string }

// applyStatement builds the statement that applies a message's upserts
// unless the group's position is already at or past pos. It returns 1 when
// it applied them, 0 when the message had been applied before.
func applyStatement(group string, pos Position, upserts []upsert) (string, []any) {
	args := []any{group, strconv.FormatUint(pos.TransactionID, 10), pos.Offset}
	var b strings.Builder
	b.WriteString(`WITH pos AS (
	INSERT INTO projector_positions AS p (consumer_group, transaction_id, "offset", applied_at)
	VALUES ($1, $2::xid8, $3, clock_timestamp())
	ON CONFLICT (consumer_group) DO UPDATE
	SET transaction_id = excluded.transaction_id, "offset" = excluded."offset", applied_at = excluded.applied_at
	WHERE (p.transaction_id, p."offset") < (excluded.transaction_id, excluded."offset")
	RETURNING 1
)`)
	for i, u := range upserts {
		if len(u.rows) == 0 {
			continue
		}
		cols := append(append([]column{}, u.keys...), u.value)
		names := make([]string, len(cols))
		params := make([]string, len(cols))
		for c, col := range cols {
			values := make([]any, len(u.rows))
			for r, row := range u.rows {
				values[r] = row[c]
			}
			args = append(args, sqlArray(col.typ, values))
			names[c] = col.name
			params[c] = fmt.Sprintf("$%d::%s[]", len(args), col.typ)
		}
		keyNames := names[:len(u.keys)]
		fmt.Fprintf(&b, `, u%d AS (
	INSERT INTO %s AS t (%s)
	SELECT * FROM unnest(%s) WHERE EXISTS (SELECT FROM pos)
	ON CONFLICT (%s) DO UPDATE SET %s = t.%s + excluded.%s
)`, i, u.table, strings.Join(names, ", "), strings.Join(params, ", "),
			strings.Join(keyNames, ", "), u.value.name, u.value.name, u.value.name)
	}
	b.WriteString("\nSELECT count(*) FROM pos")
	return b.String(), args
}

// sqlArray converts a column of values into a lib/pq array parameter.
func sqlArray(typ string, values []any) any {
	switch typ {
	case "text":
		out := make(pq.StringArray, len(values))
		for i, v := range values {
			out[i] = v.(string)
		}
		return out
	case "bigint":
		out := make(pq.Int64Array, len(values))
		for i, v := range values {
			out[i] = v.(int64)
		}
		return out
	case "double precision":
		out := make(pq.Float64Array, len(values))
		for i, v := range values {
			out[i] = v.(float64)
		}
		return out
	case "timestamptz":
		out := make(pq.StringArray, len(values))
		for i, v := range values {
			out[i] = v.(time.Time).Format(time.RFC3339Nano)
		}
		return out
	}
	panic("outbox: unsupported column type " + typ)
}

// deltas accumulates additions to the rows of one table, so each row is
// upserted once per statement (ON CONFLICT cannot touch a row twice).
type deltas[K comparable, V int64 | float64] struct {
	order []K
	sum   map[K]V
}

func (d *deltas[K, V]) add(k K, v V) {
	if d.sum == nil {
		d.sum = map[K]V{}
	}
	if _, ok := d.sum[k]; !ok {
		d.order = append(d.order, k)
	}
	d.sum[k] += v
}

// rows returns the non-zero deltas in the order their keys first appeared,
// each as its key columns then its value. (Only one transaction of a consumer
// group runs at a time, so lock order does not matter.)
func (d *deltas[K, V]) rows(keyCols func(K) []any) [][]any {
	var out [][]any
	for _, k := range d.order {
		if d.sum[k] == 0 {
			continue
		}
		out = append(out, append(keyCols(k), any(d.sum[k])))
	}
	return out
}

// inSavepoint runs fn inside a savepoint of tx: if fn fails, every write it
// made is rolled back and tx stays usable for the message's next attempt.
func inSavepoint(ctx context.Context, tx *sql.Tx, fn func() error) error {
	if _, err := tx.ExecContext(ctx, `SAVEPOINT projection_attempt`); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(); err != nil {
		// The attempt's context may be what failed it; the rollback must still run.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rbErr := tx.ExecContext(rctx, `ROLLBACK TO SAVEPOINT projection_attempt`); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rbErr))
		}
		return err
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT projection_attempt`); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}
