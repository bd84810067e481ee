// Package runtimes holds the worker runtimes to what they promise under a
// bad network and a struggling server (issue 29): the Go Runner and the
// real `taskmaster worker --exec` binary, each run against a real server
// through tests/faultproxy, which answers 503 and 429, drops answers and
// partitions on command.
package runtimes

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startServer runs a server whose reapers act fast: leases are reaped every
// 50 ms, and workers are asked to beat every 2 s (a 6 s stale threshold),
// so a task its worker stops listing is taken back as orphaned within a few
// seconds. (Not faster: a heartbeat built just before its worker learnt of
// a claim, and processed more than an interval after that claim, takes the
// claimed task back; on a loaded machine, with the race detector, a
// 500 ms interval made that happen.) Workers are declared dead only after a
// minute: the outages of these tests are shorter.
func startServer(t *testing.T, mutate func(*app.Config)) *testserver.Server {
	t.Helper()
	return testserver.Start(t, func(c *app.Config) {
		c.LeaseReaperInterval = 50 * time.Millisecond
		c.ReaperInterval = 100 * time.Millisecond
		c.App.Liveness.StaleAfter = 6 * time.Second
		c.App.Liveness.DeadAfter = time.Minute
		c.App.Backoff.Base = 10 * time.Millisecond
		if mutate != nil {
			mutate(c)
		}
	})
}

// sdk is a client of url.
func sdk(t *testing.T, url string) *client.Client {
	t.Helper()
	c, err := client.New(url, client.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	require.NoError(t, err)
	return c
}

// logBuffer is a runner's log, safe to read while it grows.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runner is a Runner running until stop.
type runner struct {
	*client.Runner
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// startRunner runs a runner of c with cfg (fast polling and short long
// polls unless set) and h; it is stopped when the test ends.
func startRunner(t *testing.T, c *client.Client, cfg client.RunnerConfig, h client.HandlerFunc) *runner {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval, cfg.MaxIdleInterval = 5*time.Millisecond, 50*time.Millisecond
	}
	if cfg.ClaimWait == 0 {
		cfg.ClaimWait = 300 * time.Millisecond
	}
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := client.NewRunner(c, cfg, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	out := &runner{Runner: r, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { out.done <- r.Run(ctx) }()
	t.Cleanup(func() {
		_ = out.stop()
		if t.Failed() {
			t.Logf("runner %s log:\n%s", r.WorkerID(), logs)
		}
	})
	return out
}

// stop cancels the runner's context and waits (at most a minute) for Run.
func (r *runner) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = r.wait(time.Minute)
	})
	return r.err
}

// wait waits up to d for Run to return, and returns its error.
func (r *runner) wait(d time.Duration) error {
	select {
	case err := <-r.done:
		r.done <- err // for a later wait
		return err
	case <-time.After(d):
		return fmt.Errorf("runner %s did not stop within %s", r.WorkerID(), d)
	}
}

// poll waits for cond, failing the test after timeout.
func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// getTask reads a task.
func getTask(t *testing.T, c *client.Client, id string) *client.Task {
	t.Helper()
	tk, err := c.Get(context.Background(), id)
	require.NoError(t, err)
	return tk
}

// outcomes lists how a task's attempts ended ("" for the running one).
func outcomes(t *testing.T, c *client.Client, id string) []client.AttemptOutcome {
	t.Helper()
	as, err := c.Attempts(context.Background(), id)
	require.NoError(t, err)
	out := make([]client.AttemptOutcome, len(as))
	for i, a := range as {
		out[i] = a.Outcome
	}
	return out
}

// submit submits p and returns the task.
func submit(t *testing.T, c *client.Client, p client.SubmitParams) *client.Task {
	t.Helper()
	tk, err := c.Submit(context.Background(), p)
	require.NoError(t, err)
	return tk
}
