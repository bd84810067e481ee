package application_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// gatedTx counts transactions and holds the first `hold` of them open
// before their commits (each sends on paused) until release is closed.
type gatedTx struct {
	inner   ports.TxRunner
	hold    int64
	runs    atomic.Int64
	paused  chan struct{}
	release chan struct{}
}

// newGatedTx holds the first transaction.
func newGatedTx(inner ports.TxRunner) *gatedTx { return newHeldTx(inner, 1) }

// newHeldTx holds the first n transactions.
func newHeldTx(inner ports.TxRunner, n int) *gatedTx {
	return &gatedTx{inner: inner, hold: int64(n), paused: make(chan struct{}, n), release: make(chan struct{})}
}

func (g *gatedTx) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	n := g.runs.Add(1)
	return g.inner.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if err := fn(ctx, st); err != nil {
			return err
		}
		if n <= g.hold {
			g.paused <- struct{}{}
			<-g.release
		}
		return nil
	})
}

// gatedTasks are the task use cases over a gated runner, one shared
// transaction of each kind at a time.
func gatedTasks(s services) (*application.TaskService, *gatedTx) {
	g := newGatedTx(s.tx)
	return gatedTasksOver(g), g
}

// gatedTasksOver are the task use cases over tx, one shared transaction of
// each kind at a time.
func gatedTasksOver(tx ports.TxRunner) *application.TaskService {
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig(), ConcurrentBatches: 1}
	return application.NewTaskService(tx, cfg)
}

// claimWhileTheFirstWaits starts claim 0, and once its transaction is open
// (and held) the n-1 others, which queue for the next one; then it lets the
// first commit.
func claimWhileTheFirstWaits(t *testing.T, tasks *application.TaskService, g *gatedTx, n int, claim func(i int)) {
	t.Helper()
	claim(0)
	<-g.paused // the first claim's transaction is open
	for i := 1; i < n; i++ {
		claim(i)
	}
	require.Eventually(t, func() bool { c, _ := tasks.Queued(); return c == n-1 }, 10*time.Second, time.Millisecond)
	close(g.release)
}

// Claims that arrive while a claim transaction runs are served together by
// the next one: each worker gets its own tasks and its own answer (a dead
// worker its error, a draining one nothing), and each claimed event carries
// its own request's correlation id.
func TestConcurrentClaimsShareOneTransaction(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	for range 12 {
		_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "shared"})
		require.NoError(t, err)
	}
	names := []string{"first", "w1", "w2", "w3", "w4", "dead", "draining"}
	for _, id := range names {
		_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: id, Queues: []string{"shared"}})
		require.NoError(t, err)
	}
	_, err := s.db.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'dead'`)
	require.NoError(t, err)
	_, err = s.workers.Drain(ctx, "draining")
	require.NoError(t, err)
	tasks, g := gatedTasks(s)

	type answer struct {
		tasks []*task.Task
		err   error
	}
	answers := make([]chan answer, len(names))
	claim := func(i int) {
		answers[i] = make(chan answer, 1)
		go func() {
			cctx := ports.WithCorrelationID(ctx, "cid-"+names[i])
			r, err := tasks.Claim(cctx, ports.ClaimCommand{WorkerID: names[i], Limit: ptr(2)})
			answers[i] <- answer{r.Tasks, err}
		}()
	}
	claimWhileTheFirstWaits(t, tasks, g, len(names), claim)

	seen := map[string]bool{}
	for i, name := range names {
		a := <-answers[i]
		switch name {
		case "dead":
			require.ErrorIs(t, a.err, worker.ErrDead)
			continue
		case "draining":
			require.NoError(t, a.err)
			require.Empty(t, a.tasks)
			continue
		}
		require.NoError(t, a.err, name)
		require.Len(t, a.tasks, 2, name)
		for _, tk := range a.tasks {
			require.Equal(t, name, tk.Snapshot().WorkerID)
			require.False(t, seen[tk.ID().String()], "a task handed out twice")
			seen[tk.ID().String()] = true
		}
	}
	require.Equal(t, int64(2), g.runs.Load(), "the first claim's transaction, then one for the six others")

	var payloads []json.RawMessage
	require.NoError(t, s.db.Select(&payloads, `SELECT payload FROM watermill_taskmaster_events ORDER BY "offset" DESC LIMIT 1`))
	var env struct{ Events []event.Event }
	require.NoError(t, json.Unmarshal(payloads[0], &env))
	require.Len(t, env.Events, 8, "four workers' claims in one message")
	for _, e := range env.Events {
		require.Equal(t, event.TaskClaimed, e.Type)
		require.Equal(t, fmt.Sprintf("cid-%s", e.WorkerID), e.CorrelationID)
	}
}
