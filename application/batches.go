package application

import (
	"context"

	"github.com/taskmaster/taskmaster/ports"
)

// inBatches runs batch repeatedly, each run in its own transaction, until a
// run handles fewer than size rows (or none): a backlog is worked off in short
// transactions instead of one long one (a long transaction stalls every
// SKIP LOCKED queue and the outbox). batch returns its report and how many
// rows it handled; committed receives the report of each run that
// committed, once, even when the runner retried the transaction.
func inBatches[R any](ctx context.Context, tx ports.TxRunner, size int,
	batch func(ctx context.Context, st ports.Stores) (R, int, error), committed func(R)) error {
	for {
		var (
			rep R
			n   int
		)
		err := tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			var err error
			rep, n, err = batch(ctx, st)
			return err
		})
		if err != nil {
			return err
		}
		committed(rep)
		if n == 0 || n < size {
			return nil
		}
	}
}
