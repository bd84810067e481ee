package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
)

// Router runs the projectors: a Watermill router with one watermill-sql
// subscriber per projector, each in the projector's consumer group, on the
// outbox topic. It is a background service: Start, then Stop.
type Router struct {
	router *message.Router
	logger *zap.Logger

	// hooks lets tests act inside a message's savepoint.
	hooks hooks
	// closing is set when Stop begins.
	closing atomic.Bool

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
}

// hooks run inside the savepoint of each attempt, around Apply.
type hooks struct {
	before func(ctx context.Context, tx *sql.Tx, msg *message.Message) error
	after  func(ctx context.Context, tx *sql.Tx, msg *message.Message) error
}

// NewRouter builds the router over db. Schema initialisation is off: the
// migrations create the outbox tables and the built-in groups' offsets rows
// (the subscriber inserts a zero offset for a new group itself).
func NewRouter(db *sql.DB, cfg Config, logger *zap.Logger, projectors ...*Projector) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	r := &Router{logger: logger}
	wlogger := newLogger(logger.Named("watermill"), r.closing.Load)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, wlogger)
	if err != nil {
		return nil, fmt.Errorf("watermill router: %w", err)
	}
	r.router = router
	for _, p := range projectors {
		sub, err := newSubscriber(db, p.ConsumerGroup(), cfg, wlogger)
		if err != nil {
			return nil, err
		}
		router.AddConsumerHandler(p.ConsumerGroup(), postgres.EventsTopic, sub, r.handler(p))
	}
	return r, nil
}

// newSubscriber returns a watermill-sql subscriber of the outbox topic in
// consumer group group, with the delivery settings of cfg. Messages it
// delivers carry their outbox position (see SchemaAdapter) and the
// subscriber's transaction (sql.TxFromContext).
func newSubscriber(db *sql.DB, group string, cfg Config, logger watermill.LoggerAdapter) (*wsql.Subscriber, error) {
	ackDeadline := cfg.AckDeadline
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup:    group,
		AckDeadline:      &ackDeadline,
		PollInterval:     cfg.PollInterval,
		ResendInterval:   cfg.ResendInterval,
		RetryInterval:    time.Second, // after a query error (database down, ...)
		SchemaAdapter:    SchemaAdapter{DefaultPostgreSQLSchema: wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: cfg.BatchSize}},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: false,
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("outbox subscriber %s: %w", group, err)
	}
	return sub, nil
}

// handler applies one message with p, inside a savepoint of the subscriber's
// transaction (a REPEATABLE READ transaction that also holds the consumer
// group's offsets row and commits the new offset). A failed attempt rolls
// back to the savepoint and returns the error: the router nacks and the
// subscriber delivers the message again in the same transaction.
func (r *Router) handler(p *Projector) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		ctx := msg.Context()
		tx, ok := wsql.TxFromContext(ctx)
		if !ok {
			return errors.New("outbox message without the subscriber's transaction")
		}
		pos, err := PositionOf(msg)
		if err != nil {
			return err
		}
		var env postgres.Envelope
		if err := json.Unmarshal(msg.Payload, &env); err != nil {
			// Retrying cannot fix it: log and skip.
			r.logger.Error("skipping undecodable outbox message",
				zap.String("consumer_group", p.ConsumerGroup()), zap.String("uuid", msg.UUID),
				zap.Uint64("transaction_id", pos.TransactionID), zap.Int64("offset", pos.Offset), zap.Error(err))
			return nil
		}
		err = inSavepoint(ctx, tx, func() error {
			if r.hooks.before != nil {
				if err := r.hooks.before(ctx, tx, msg); err != nil {
					return err
				}
			}
			if _, err := p.Apply(ctx, tx, pos, env.Events); err != nil {
				return err
			}
			if r.hooks.after != nil {
				return r.hooks.after(ctx, tx, msg)
			}
			return nil
		})
		if err != nil && ctx.Err() != nil {
			// Stopping or past the ack deadline: the message comes again.
			return fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		return err
	}
}

// Start runs the router in the background and returns once every
// subscription is running. ctx bounds only the wait: the router runs on its
// own context until Stop.
func (r *Router) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("outbox router already started")
	}
	r.started = true
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	r.mu.Unlock()

	go func() {
		defer close(r.done)
		if err := r.router.Run(runCtx); err != nil {
			r.mu.Lock()
			r.runErr = err
			r.mu.Unlock()
		}
	}()
	select {
	case <-r.router.Running():
		return nil
	case <-r.done:
		r.mu.Lock()
		err := r.runErr
		r.mu.Unlock()
		return fmt.Errorf("outbox router stopped while starting: %w", err)
	case <-ctx.Done():
		_ = r.Stop(context.Background())
		return fmt.Errorf("outbox router start: %w", ctx.Err())
	}
}

// Stop closes the router, waiting for in-flight messages (up to the close
// timeout), and returns when it has stopped. It is idempotent.
func (r *Router) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if cancel == nil {
		return nil
	}
	r.closing.Store(true)
	err := r.router.Close()
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("outbox router stop: %w", ctx.Err()))
	}
	if err != nil {
		return fmt.Errorf("close outbox router: %w", err)
	}
	return nil
}
