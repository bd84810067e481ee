// Command goworker is the Go SDK's side of the SDK conformance scenario
// (tests/sdks): a client.Runner over the scenario's queue whose handler
// does what each task's payload says, logging every start and success to
// the file the scenario reads. The Python and TypeScript SDKs have the same
// program (client/python/tests/conformance_worker.py,
// client/typescript/conformance/worker.ts).
//
// Environment: TASKMASTER_URL, TASKMASTER_CONFORMANCE_QUEUE,
// TASKMASTER_CONFORMANCE_LOG, TASKMASTER_CONFORMANCE_WORKER (the worker id).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}

func run() error {
	queue := os.Getenv("TASKMASTER_CONFORMANCE_QUEUE")
	logFile, err := os.OpenFile(os.Getenv("TASKMASTER_CONFORMANCE_LOG"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	var mu sync.Mutex
	record := func(what string, t client.Task, extra ...any) {
		mu.Lock()
		defer mu.Unlock()
		line := fmt.Sprintf("%s %s %d", what, t.ID, t.Attempts)
		for _, e := range extra {
			line += fmt.Sprintf(" %v", e)
		}
		_, _ = logFile.WriteString(line + "\n")
	}

	c, err := client.New(os.Getenv("TASKMASTER_URL"))
	if err != nil {
		return err
	}
	r, err := client.NewRunner(c, client.RunnerConfig{
		WorkerID:     os.Getenv("TASKMASTER_CONFORMANCE_WORKER"),
		Queues:       []string{queue},
		Concurrency:  4,
		ClaimWait:    time.Second,
		DrainTimeout: 10 * time.Second,
		LeaseSeconds: 30,
		// Faster than the server asks (tests/sdks): a cancel is seen within a second.
		HeartbeatInterval: time.Second,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, func(ctx context.Context, t client.Task) (any, error) {
		record("start", t)
		var p struct {
			Kind string `json:"kind"`
			I    int    `json:"i"`
		}
		if err := t.DecodePayload(&p); err != nil {
			return nil, client.NonRetryable(err)
		}
		result := map[string]int{"i": p.I}
		switch p.Kind {
		case "ok":
			time.Sleep(20 * time.Millisecond)
		case "retry":
			if t.Attempts == 1 {
				return nil, errors.New("transient failure")
			}
		case "dead":
			return nil, client.NonRetryable(errors.New("permanent failure"))
		case "snooze":
			if t.Snoozes == 0 {
				return nil, client.Snooze(time.Second)
			}
		case "next":
			record("done", t)
			return client.Next{Result: result, Enqueue: []client.SubmitParams{{Queue: queue, Payload: map[string]any{"kind": "child", "i": 1000}}}}, nil
		case "child":
		case "cancel":
			select {
			case <-ctx.Done():
				record("stopped", t, context.Cause(ctx))
				return nil, fmt.Errorf("stopped: %w", context.Cause(ctx))
			case <-time.After(60 * time.Second):
			}
		default:
			return nil, client.NonRetryable(fmt.Errorf("unknown kind %q", p.Kind))
		}
		record("done", t)
		return result, nil
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return r.Run(ctx)
}
