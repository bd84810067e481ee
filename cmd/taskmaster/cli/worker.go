package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"time"

	"github.com/taskmaster/taskmaster/client"
)

// ExitTempFail is the exit code (sysexits EX_TEMPFAIL) by which a command
// asks for its task to be retried. Other non-zero codes are retried too,
// unless listed with --non-retryable-exit.
const ExitTempFail = 75

// ExitSnooze is the default exit code (--snooze-exit) by which a command
// asks for its task to be snoozed: put back for the number of seconds it
// printed on standard output, without spending an attempt. It lies outside
// the sysexits range (64-78) and the shells' own codes (126, 127, 128+n).
const ExitSnooze = 99

// Limits on what a command's output may hold.
const (
	// maxStdout is the most standard output kept as a result; the server
	// takes at most 1 MiB bodies by default.
	maxStdout = 1 << 20
	// stderrTail is how much of the end of standard error a failure reports.
	stderrTail = client.MaxErrorBytes - 1024
	// killGrace is how long a cancelled command has between SIGTERM and
	// SIGKILL.
	killGrace = 5 * time.Second
)

type workerState struct {
	id           string
	queues       multiFlag
	tags         multiFlag
	exec         string
	concurrency  int
	nonRetryable intsFlag
	drainTimeout time.Duration
	taskTimeout  time.Duration
	snoozeExit   int
}

func workerFlags(fs *flag.FlagSet, e *env) {
	s := &workerState{}
	e.state = s
	fs.Var(&s.queues, "queue", "queue to serve (repeatable; none: any queue)")
	fs.StringVar(&s.exec, "exec", "", "command run through /bin/sh -c once per task, payload JSON on stdin (required)")
	fs.IntVar(&s.concurrency, "concurrency", 1, "tasks run at once")
	fs.Var(&s.nonRetryable, "non-retryable-exit", "exit code that fails the task for good (repeatable)")
	fs.IntVar(&s.snoozeExit, "snooze-exit", ExitSnooze, "exit code that snoozes the task for the whole number of seconds the command printed on stdout, without spending an attempt (0: off)")
	fs.DurationVar(&s.drainTimeout, "drain-timeout", client.DefaultDrainTimeout, "on SIGINT/SIGTERM, how long running commands may finish before they are stopped and their tasks requeued")
	fs.DurationVar(&s.taskTimeout, "task-timeout", 0, "stop a command after this long and fail its task as retryable (0: no limit)")
	fs.StringVar(&s.id, "id", "", "worker id (default hostname-pid)")
	fs.Var(&s.tags, "tag", "a tag this worker has (repeatable)")
}

// runWorker is a generic worker: it runs the --exec command once per task.
// Exit 0 completes the task with the command's standard output (as JSON
// when it parses, else as a JSON string; empty output is null); exit
// --snooze-exit (99) with a number of seconds on standard output snoozes
// it; any other exit fails it with the end of standard error. Exit 75 and
// codes not listed in --non-retryable-exit are retryable.
//
// The command gets the task's trace context as TRACEPARENT and TRACESTATE
// (when the task has one), and reports progress by writing lines
// "progress <percent> <message>" to file descriptor 3 (TASKMASTER_PROGRESS_FD).
// A command still running when its task's time limit is up is stopped
// (SIGTERM, then SIGKILL), like one cancelled by shutdown.
func runWorker(ctx context.Context, e *env, _ []string) error {
	s := e.state.(*workerState)
	if s.exec == "" {
		return usagef("worker: --exec is required")
	}
	if s.concurrency < 1 {
		return usagef("worker: --concurrency must be at least 1")
	}
	if s.drainTimeout < 0 || s.taskTimeout < 0 {
		return usagef("worker: durations must not be negative")
	}
	if s.snoozeExit != 0 && (s.snoozeExit < 1 || s.snoozeExit > 255 || s.snoozeExit == ExitTempFail || slices.Contains(s.nonRetryable, s.snoozeExit)) {
		return usagef("worker: --snooze-exit must be 1-255 (0: off), and neither 75 (retry) nor a --non-retryable-exit code")
	}
	if s.drainTimeout == 0 {
		s.drainTimeout = time.Nanosecond // zero means the default to the runner
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, nil))
	h := &execHandler{command: s.exec, nonRetryable: s.nonRetryable, timeout: s.taskTimeout, snoozeExit: s.snoozeExit}
	r, err := client.NewRunner(e.client, client.RunnerConfig{
		WorkerID:     s.id,
		Queues:       s.queues,
		Tags:         s.tags,
		Concurrency:  s.concurrency,
		DrainTimeout: s.drainTimeout,
		CancelGrace:  killGrace + 5*time.Second, // room for SIGTERM, then SIGKILL
		Logger:       logger,
	}, h.handle)
	if err != nil {
		return usagef("worker: %v", err)
	}
	logger.Info("worker starting", "url", e.url, "exec", s.exec)
	return r.Run(ctx)
}

// execHandler runs one command per task.
type execHandler struct {
	command      string
	nonRetryable []int
	timeout      time.Duration
	// snoozeExit is the exit code that asks for a snooze (0: none).
	snoozeExit int
}

// errTaskTimeout is the cause of a command stopped by --task-timeout.
var errTaskTimeout = errors.New("task timeout")

func (h *execHandler) handle(ctx context.Context, t client.Task) (any, error) {
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, h.timeout, errTaskTimeout)
		defer cancel()
	}
	payload := []byte(t.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", h.command)
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Env = append(os.Environ(),
		"TASKMASTER_TASK_ID="+t.ID,
		"TASKMASTER_QUEUE="+t.Queue,
		"TASKMASTER_ATTEMPT="+strconv.Itoa(t.Attempts),
		"TASKMASTER_MAX_ATTEMPTS="+strconv.Itoa(t.MaxAttempts),
		"TASKMASTER_PROGRESS_FD="+strconv.Itoa(progressFD),
	)
	if t.Trace != nil {
		cmd.Env = append(cmd.Env, "TRACEPARENT="+t.Trace.Traceparent)
		if t.Trace.Tracestate != "" {
			cmd.Env = append(cmd.Env, "TRACESTATE="+t.Trace.Tracestate)
		}
	}
	stdout := &limitedBuffer{limit: maxStdout}
	stderr := &tailBuffer{limit: stderrTail}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	progress, err := newProgressPipe(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("progress pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{progress.w}
	ownProcessGroup(cmd)
	cmd.Cancel = func() error { return signalGroup(cmd, false) }
	cmd.WaitDelay = killGrace
	err = cmd.Start()
	progress.started() // the command holds its end now
	if err == nil {
		err = cmd.Wait()
	}
	progress.close()

	if ctx.Err() != nil {
		// Stopped by shutdown or --task-timeout: retryable either way (the
		// runner fails shutdown-cancelled tasks as retryable regardless).
		_ = signalGroup(cmd, true) // stragglers that ignored SIGTERM
		if errors.Is(context.Cause(ctx), errTaskTimeout) {
			return nil, fmt.Errorf("command stopped after --task-timeout %s%s", h.timeout, stderr.suffix())
		}
		return nil, fmt.Errorf("command stopped: %w%s", context.Cause(ctx), stderr.suffix())
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil && stdout.overflow:
		return nil, client.NonRetryable(fmt.Errorf("command output exceeds %d bytes", maxStdout))
	case err == nil:
		return result(stdout.Bytes()), nil
	case errors.As(err, &exitErr) && h.snoozeExit != 0 && exitErr.ExitCode() == h.snoozeExit:
		return nil, snoozeOf(stdout.Bytes(), h.snoozeExit)
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		code := exitErr.ExitCode()
		failure := fmt.Errorf("exit status %d%s", code, stderr.suffix())
		if code != ExitTempFail && slices.Contains(h.nonRetryable, code) {
			return nil, client.NonRetryable(failure)
		}
		return nil, failure
	default: // killed by a signal, or could not start
		return nil, fmt.Errorf("command failed: %v%s", err, stderr.suffix())
	}
}

// snoozeOf is the snooze a command asked for by exiting with code: the
// whole number of seconds on its standard output (1 to 30 days), or a
// retryable failure saying what was wrong with the output.
func snoozeOf(out []byte, code int) error {
	text := string(bytes.TrimSpace(out))
	secs, err := strconv.Atoi(text)
	if err != nil || secs < 1 || time.Duration(secs)*time.Second > client.MaxSnooze {
		return fmt.Errorf("exit status %d asks for a snooze, but standard output %q is not a whole number of seconds between 1 and %d",
			code, oneLine(text, 80), int(client.MaxSnooze/time.Second))
	}
	return client.Snooze(time.Duration(secs) * time.Second)
}

// result is the task's result from the command's output: JSON when it
// parses, else the text as a JSON string; null when empty.
func result(out []byte) any {
	trimmed := bytes.TrimSpace(out)
	switch {
	case len(trimmed) == 0:
		return nil
	case json.Valid(trimmed):
		return json.RawMessage(trimmed)
	default:
		return string(bytes.TrimRight(out, "\r\n"))
	}
}

// limitedBuffer keeps the first limit bytes written and notes overflow.
type limitedBuffer struct {
	bytes.Buffer
	limit    int
	overflow bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.limit - b.Len(); room < len(p) {
		b.overflow = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// tailBuffer keeps the last limit bytes written.
type tailBuffer struct {
	buf   []byte
	limit int
	cut   bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.limit; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.cut = true
	}
	return len(p), nil
}

// suffix is ": <stderr>" for an error message, or "" when stderr was empty.
func (b *tailBuffer) suffix() string {
	text := string(bytes.TrimSpace(b.buf))
	if text == "" {
		return ""
	}
	if b.cut {
		text = "..." + text
	}
	return ": " + text
}
