package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
)

// Drain is one backlog the projection scenario made the consumer groups
// drain.
type Drain struct {
	// Backlog names it: single-event or 100-event messages.
	Backlog        string  `json:"backlog"`
	Messages       int     `json:"messages"`
	Events         int     `json:"events"`
	Seconds        float64 `json:"seconds"`
	MessagesPerSec float64 `json:"messages_per_sec"`
	EventsPerSec   float64 `json:"events_per_sec"`
}

// insertChunk is how many outbox rows one insert statement writes.
const insertChunk = 2000

// drainTimeout bounds the wait for the consumer groups to drain one backlog.
const drainTimeout = 15 * time.Minute

// runProjection measures how fast the outbox consumers drain a backlog. It
// writes the backlog straight into the outbox table while a transaction that
// holds a transaction id stays open, so no consumer sees any of it (they read
// only below the oldest running transaction); committing that transaction
// releases the whole backlog at once, and the drain is timed from then until
// every consumer group's offset has passed the last message. Two backlogs:
// opts.Tasks (200,000) messages of one event each, and a hundredth as many
// messages of 100 events each. The events are whole task lifecycles
// (submitted, claimed, completed) on queues of their own, so the statistics
// stay consistent.
func runProjection(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	if env.db == nil {
		return Report{}, errors.New("the projection scenario writes the outbox directly: give --database-url with --url")
	}
	n := opts.Tasks
	if n == 0 {
		n = 200000
	}
	run := time.Now().UnixNano()
	r := Report{Tasks: n}
	for _, b := range []struct {
		name     string
		messages int
		events   int
	}{
		{"single-event", n, 1},
		{"100-event", max(n/100, 1), 100},
	} {
		fmt.Fprintf(log, "[projection] writing a backlog of %d messages of %d events\n", b.messages, b.events)
		d, err := drainBacklog(ctx, env.db, fmt.Sprintf("projection-%d-%d", run, b.events), b.messages, b.events, mon, log)
		if err != nil {
			return Report{}, err
		}
		d.Backlog = b.name
		r.Drains = append(r.Drains, d)
		r.DurationSeconds += d.Seconds
	}
	return r, nil
}

// drainBacklog writes messages outbox messages of perMessage events each,
// invisible until it releases them together, and times their consumption.
func drainBacklog(ctx context.Context, db *sqlx.DB, queue string, messages, perMessage int, mon *monitor, log io.Writer) (Drain, error) {
	blocker, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Drain{}, err
	}
	defer func() { _ = blocker.Rollback() }()
	if _, err := blocker.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil {
		return Drain{}, fmt.Errorf("hold back the backlog: %w", err)
	}
	gen := newLifecycleGen(queue, perMessage)
	var last struct {
		tx     string
		offset int64
	}
	events := 0
	for written := 0; written < messages; {
		size := min(insertChunk, messages-written)
		payloads := make(pq.StringArray, size)
		for i := range payloads {
			evs := gen.next()
			events += len(evs)
			b, err := json.Marshal(envelope.Payload{Events: evs})
			if err != nil {
				return Drain{}, err
			}
			payloads[i] = string(b)
		}
		if err := db.QueryRowContext(ctx, `
			WITH ins AS (
				INSERT INTO watermill_taskmaster_events (uuid, payload, metadata, transaction_id)
				SELECT gen_random_uuid()::text, p::json, '{}', pg_current_xact_id()
				FROM unnest($1::text[]) WITH ORDINALITY AS u(p, i)
				ORDER BY i
				RETURNING transaction_id, "offset"
			)
			SELECT transaction_id::text, max("offset") FROM ins GROUP BY transaction_id`, payloads,
		).Scan(&last.tx, &last.offset); err != nil {
			return Drain{}, fmt.Errorf("write the backlog: %w", err)
		}
		written += size
	}
	if err := blocker.Commit(); err != nil {
		return Drain{}, err
	}
	start := time.Now()
	fmt.Fprintf(log, "[projection] released %d messages (%d events); waiting for every consumer group\n", messages, events)
	deadline := start.Add(drainTimeout)
	lastPrint := start
	for {
		var behind int
		if err := db.GetContext(ctx, &behind, `
			SELECT count(*) FROM watermill_offsets_taskmaster_events
			WHERE (last_processed_transaction_id, coalesce(offset_acked, 0)) < ($1::xid8, $2::bigint)`,
			last.tx, last.offset); err != nil {
			return Drain{}, fmt.Errorf("read the consumer groups: %w", err)
		}
		if behind == 0 {
			break
		}
		if time.Now().After(deadline) {
			return Drain{}, fmt.Errorf("%d consumer groups did not drain the backlog within %s", behind, drainTimeout)
		}
		if time.Since(lastPrint) >= time.Second {
			lastPrint = time.Now()
			s := mon.current()
			fmt.Fprintf(log, "[projection] %.0f s: %d groups behind, lag %d ms, server rss %d MiB\n",
				time.Since(start).Seconds(), behind, s.lag.Milliseconds(), s.rssBytes>>20)
		}
		select {
		case <-ctx.Done():
			return Drain{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	el := time.Since(start).Seconds()
	return Drain{
		Messages: messages, Events: events, Seconds: round3(el),
		MessagesPerSec: round1(float64(messages) / el), EventsPerSec: round1(float64(events) / el),
	}, nil
}

// lifecycleGen produces the events of whole task lifecycles, perMessage
// events at a time: a message holds one stage (submitted, claimed or
// completed) of perMessage tasks, so every task's events come in order.
type lifecycleGen struct {
	queues     []string
	perMessage int
	stage      int
	tasks      []string
	worker     string
	at         time.Time
}

func newLifecycleGen(queue string, perMessage int) *lifecycleGen {
	g := &lifecycleGen{perMessage: perMessage, worker: queue + "-worker", at: time.Now().UTC()}
	for i := range 4 {
		g.queues = append(g.queues, queue+"-"+strconv.Itoa(i))
	}
	return g
}

func (g *lifecycleGen) next() []event.Event {
	if g.stage == 0 {
		g.tasks = g.tasks[:0]
		for range g.perMessage {
			g.tasks = append(g.tasks, uuid.NewString())
		}
	}
	out := make([]event.Event, len(g.tasks))
	for i, id := range g.tasks {
		e := event.Event{Version: event.Version, TaskID: id, Queue: g.queues[i%len(g.queues)], OccurredAt: g.at,
			CorrelationID: "bench-projection"}
		switch g.stage {
		case 0:
			e.Type, e.To = event.TaskSubmitted, "PENDING"
		case 1:
			e.Type, e.From, e.To, e.Attempt, e.WorkerID = event.TaskClaimed, "PENDING", "RUNNING", 1, g.worker
			e.QueueWaitSeconds = event.Seconds(20 * time.Millisecond)
		case 2:
			e.Type, e.From, e.To, e.Attempt, e.WorkerID = event.TaskCompleted, "RUNNING", "DONE", 1, g.worker
			e.ExecutionSeconds = event.Seconds(150 * time.Millisecond)
			e.EndToEndSeconds = event.Seconds(170 * time.Millisecond)
		}
		out[i] = e
	}
	g.stage = (g.stage + 1) % 3
	return out
}
