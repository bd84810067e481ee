package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// Router feeds the projections: a Watermill router with one watermill-sql
// subscriber of the outbox topic in the consumer group ProjectionsGroup,
// whose handler applies each batch with the Projector. It is a background
// service: Start, then Stop. Each Start builds a fresh Watermill router (one
// cannot run twice), so a stopped Router starts again.
type Router struct {
	lifecycle.Base
	db        *sql.DB
	cfg       Config
	logger    *zap.Logger
	projector *Projector

	// closing is set while a run is being stopped (its shutdown errors are
	// expected, and logged at a lower level).
	closing atomic.Bool
}

var _ lifecycle.Service = (*Router)(nil)

// NewRouter returns the router of the projections over db. Schema
// initialisation is off: the migrations create the outbox tables and the
// group's offsets row.
func NewRouter(db *sql.DB, cfg Config, logger *zap.Logger) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Router{db: db, cfg: cfg, logger: logger, projector: NewProjector(cfg, logger.Named("projector"))}, nil
}

// build returns a Watermill router with the projections' subscriber.
func (r *Router) build() (*message.Router, error) {
	wlogger := newLogger(r.logger.Named("watermill"), r.closing.Load)
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: r.cfg.CloseTimeout}, wlogger)
	if err != nil {
		return nil, fmt.Errorf("watermill router: %w", err)
	}
	ackDeadline := r.cfg.AckDeadline
	sub, err := wsql.NewSubscriber(r.db, wsql.SubscriberConfig{
		ConsumerGroup:  ProjectionsGroup,
		AckDeadline:    &ackDeadline,
		PollInterval:   r.cfg.PollInterval,
		ResendInterval: r.cfg.ResendInterval,
		RetryInterval:  time.Second, // after a query error (database down, ...)
		SchemaAdapter: batchSchema{
			DefaultPostgreSQLSchema: wsql.DefaultPostgreSQLSchema{},
			maxMessages:             r.cfg.BatchSize,
			maxBytes:                r.cfg.BatchBytes,
		},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: false,
	}, wlogger)
	if err != nil {
		return nil, fmt.Errorf("outbox subscriber: %w", err)
	}
	router.AddConsumerHandler(ProjectionsGroup, envelope.Topic, sub, r.handle)
	return router, nil
}

// handle applies one batch (one Watermill message, see batchSchema) on the
// subscriber's transaction: a REPEATABLE READ transaction that also holds
// the consumer group's offsets row and commits the new offset. An error
// nacks the batch: the subscriber delivers it again in the same transaction
// (the projections' positions skip whatever was applied).
func (r *Router) handle(msg *message.Message) error {
	ctx := msg.Context()
	tx, ok := wsql.TxFromContext(ctx)
	if !ok {
		return errors.New("outbox batch without the subscriber's transaction")
	}
	batch, err := decodeBatch(msg.Payload)
	if err != nil {
		return err
	}
	err = r.projector.Apply(ctx, tx, batch)
	if err != nil && ctx.Err() != nil {
		// Stopping or past the ack deadline: the batch comes again.
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// Start runs the router in the background and returns once the subscription
// is running. ctx bounds only the wait: the router runs on its own context
// until Stop.
func (r *Router) Start(ctx context.Context) error {
	var router *message.Router
	ended := make(chan error, 1)
	// stopped is this run's own flag: r.closing is reset by the next
	// Start, which may begin as soon as a concurrent Stop ended this run.
	stopped := new(atomic.Bool)
	err := r.StartLoop(ctx, "outbox router", func(context.Context) (lifecycle.LoopFunc, error) {
		var err error
		if router, err = r.build(); err != nil {
			return nil, err
		}
		r.closing.Store(false)
		return func(ctx context.Context) {
			// The subscriber runs on its own context, cancelled only once
			// Close has let the batch in flight finish.
			runCtx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				<-ctx.Done()
				stopped.Store(true)
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
		if stopped.Load() {
			return nil // a concurrent Stop ended the run it started
		}
		_ = r.Stop(context.Background())
		return fmt.Errorf("outbox router stopped while starting: %w", err)
	case <-ctx.Done():
		_ = r.Stop(context.Background())
		return fmt.Errorf("outbox router start: %w", ctx.Err())
	}
}

// Stop closes the router, waiting for the batch in flight (up to the close
// timeout) and for its goroutines, or for ctx to end. It is idempotent.
func (r *Router) Stop(ctx context.Context) error {
	if err := r.StopLoop(ctx); err != nil {
		return fmt.Errorf("outbox router: %w", err)
	}
	return nil
}
