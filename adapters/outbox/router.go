package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// Router runs the projectors: a Watermill router with one watermill-sql
// subscriber per projector, each in the projector's consumer group, on the
// outbox topic. It is a background service: Start, then Stop. Each Start
// builds a fresh Watermill router (one cannot run twice), so a stopped
// Router starts again.
type Router struct {
	lifecycle.Base
	db         *sql.DB
	cfg        Config
	logger     *zap.Logger
	projectors []*Projector

	// hooks lets tests act inside a message's savepoint.
	hooks hooks
	// closing is set while a run is being stopped (its shutdown errors are
	// expected, and logged at a lower level).
	closing atomic.Bool
}

var _ lifecycle.Service = (*Router)(nil)

// hooks run inside the savepoint of each attempt, around Apply.
type hooks struct {
	before func(ctx context.Context, tx *sql.Tx, msg *message.Message) error
	after  func(ctx context.Context, tx *sql.Tx, msg *message.Message) error
}

// NewRouter returns the router of projectors over db. Schema initialisation
// is off: the migrations create the outbox tables and the built-in groups'
// offsets rows (the subscriber inserts a zero offset for a new group itself).
func NewRouter(db *sql.DB, cfg Config, logger *zap.Logger, projectors ...*Projector) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Router{db: db, cfg: cfg, logger: logger, projectors: projectors}, nil
}

// build returns a Watermill router with one subscriber per projector.
func (r *Router) build() (*message.Router, error) {
	wlogger := newLogger(r.logger.Named("watermill"), r.closing.Load)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: r.cfg.CloseTimeout}, wlogger)
	if err != nil {
		return nil, fmt.Errorf("watermill router: %w", err)
	}
	for _, p := range r.projectors {
		sub, err := newSubscriber(r.db, p.ConsumerGroup(), r.cfg, wlogger)
		if err != nil {
			return nil, err
		}
		router.AddConsumerHandler(p.ConsumerGroup(), postgres.EventsTopic, sub, r.handler(p))
	}
	return router, nil
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
	var router *message.Router
	ended := make(chan error, 1)
	err := r.StartLoop(ctx, "outbox router", func(context.Context) (lifecycle.LoopFunc, error) {
		var err error
		if router, err = r.build(); err != nil {
			return nil, err
		}
		r.closing.Store(false)
		return func(ctx context.Context) {
			// The subscribers run on their own context, cancelled only once
			// Close has let in-flight messages finish.
			runCtx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-ctx.Done()
				r.closing.Store(true)
				if err := router.Close(); err != nil {
					r.logger.Warn("close outbox router", zap.Error(err))
				}
				cancel()
			}()
			ended <- router.Run(runCtx)
			<-ctx.Done() // Stop ends the loop, even after a failed run
		}, nil
	})
	if err != nil {
		return err
	}
	select {
	case <-router.Running():
		return nil
	case err := <-ended:
		_ = r.Stop(context.Background())
		return fmt.Errorf("outbox router stopped while starting: %w", err)
	case <-ctx.Done():
		_ = r.Stop(context.Background())
		return fmt.Errorf("outbox router start: %w", ctx.Err())
	}
}

// Stop closes the router, waiting for in-flight messages (up to the close
// timeout) and for its goroutines, or for ctx to end. It is idempotent.
func (r *Router) Stop(ctx context.Context) error {
	if err := r.StopLoop(ctx); err != nil {
		return fmt.Errorf("outbox router: %w", err)
	}
	return nil
}
