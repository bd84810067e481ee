package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExamplePrintsEveryEventOnceInItsOwnGroup(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db, err := sqlx.Connect("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	svc := application.NewTaskService(postgres.NewTxRunner(db),
		application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig()})
	ctx := ports.WithCorrelationID(context.Background(), "req-7")
	tk, _, err := svc.Submit(ctx, task.SubmitParams{Queue: "emails"})
	require.NoError(t, err)

	out := &syncBuffer{}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(runCtx, []string{"-group", "billing", "-poll", "20ms"}, func(string) string { return url }, out, io.Discard)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "task.submitted") }, 30*time.Second, 10*time.Millisecond)
	_, err = svc.Cancel(ctx, tk.ID())
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "audit.task_cancelled") }, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	require.Contains(t, lines[0], "task.submitted queue=emails task="+tk.ID().String()+" new->PENDING correlation_id=req-7")
	require.Contains(t, lines[1], "task.dead_lettered queue=emails task="+tk.ID().String()+" PENDING->DEAD reason=cancelled")
	require.Contains(t, lines[2], "audit.task_cancelled queue=emails task="+tk.ID().String(), "the operator's action, in the same message")
	var groups []string
	require.NoError(t, db.Select(&groups, `SELECT consumer_group FROM watermill_offsets_taskmaster_events ORDER BY 1`))
	require.Equal(t, []string{"billing", "projections"}, groups, "the example registered its own group")
}
