// Command subscriber-example shows how another Go service subscribes to
// Taskmaster's lifecycle events: a watermill-sql (v3) subscriber in its own
// consumer group on the outbox topic "taskmaster_events" of Taskmaster's
// database. It prints one line per event.
//
//	TASKMASTER_DATABASE_URL=postgres://... go run ./cmd/subscriber-example -group billing
//
// Each outbox message is one committed transaction's events, as JSON
// {"events": [...]} (see domain/event). Messages arrive in commit order. The
// consumer group's position (table watermill_offsets_taskmaster_events)
// advances in the same transaction that delivers the messages; to make your
// own side effects exactly-once, write them on that transaction
// (sql.TxFromContext(msg.Context())), or deduplicate on the message UUID.
//
// A new group starts at the oldest message still in the outbox. Taskmaster's
// janitor deletes a message only once every consumer group has consumed it,
// so a group that stops consuming for good must be removed:
//
//	DELETE FROM watermill_offsets_taskmaster_events WHERE consumer_group = 'billing';
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq" // the "postgres" driver

	"github.com/taskmaster/taskmaster/domain/event"
)

// topic is Taskmaster's outbox topic (tables watermill_taskmaster_events and
// watermill_offsets_taskmaster_events, created by Taskmaster's migrations).
const topic = "taskmaster_events"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "subscriber-example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("subscriber-example", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", getenv("TASKMASTER_DATABASE_URL"), "Taskmaster's PostgreSQL URL (env TASKMASTER_DATABASE_URL)")
	group := fs.String("group", "subscriber_example", "this service's consumer group")
	poll := fs.Duration("poll", 100*time.Millisecond, "how often to look for new events when caught up")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("set TASKMASTER_DATABASE_URL or -database-url")
	}
	db, err := sql.Open("postgres", *url)
	if err != nil {
		return err
	}
	defer db.Close()

	logger := watermill.NewStdLoggerWithOut(stderr, false, false)
	ackDeadline := 30 * time.Second
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup:  *group,
		PollInterval:   *poll,
		ResendInterval: time.Second,
		AckDeadline:    &ackDeadline,
		SchemaAdapter:  wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
		// Taskmaster's migrations own the tables; the subscriber only
		// inserts its group's zero offset on first use.
		InitializeSchema: false,
	}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddConsumerHandler("print", topic, sub, func(msg *message.Message) error {
		var envelope struct {
			Events []event.Event `json:"events"`
		}
		if err := json.Unmarshal(msg.Payload, &envelope); err != nil {
			fmt.Fprintf(stderr, "skipping message %s: %v\n", msg.UUID, err)
			return nil // retrying cannot fix it
		}
		for _, e := range envelope.Events {
			fmt.Fprintln(stdout, describe(e))
		}
		return nil
	})
	// router.Run returns once ctx is cancelled and in-flight messages are done.
	return router.Run(ctx)
}

// describe renders an event on one line.
func describe(e event.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.OccurredAt.UTC().Format(time.RFC3339Nano), e.Type)
	field := func(name, value string) {
		if value != "" {
			fmt.Fprintf(&b, " %s=%s", name, value)
		}
	}
	field("queue", e.Queue)
	field("task", e.TaskID)
	field("worker", e.WorkerID)
	if len(e.Queues) > 0 {
		field("queues", strings.Join(e.Queues, ","))
	}
	if e.From != "" || e.To != "" {
		fmt.Fprintf(&b, " %s->%s", orElse(e.From, "new"), orElse(e.To, "gone"))
	}
	field("reason", e.Reason)
	if e.Attempt > 0 {
		fmt.Fprintf(&b, " attempt=%d", e.Attempt)
	}
	field("correlation_id", e.CorrelationID)
	return b.String()
}

func orElse(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
