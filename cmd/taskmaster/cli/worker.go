package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/taskmaster/taskmaster/adapters/postgres"
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

// withheldEnv are the worker's credentials: they are not in a command's
// environment unless passed with --pass-env.
var withheldEnv = []string{client.EnvAPIKey, "TASKMASTER_DATABASE_URL"}

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
	passEnv      multiFlag
}

func workerFlags(fs *flag.FlagSet, e *env) {
	s := &workerState{}
	e.state = s
	fs.Var(&s.queues, "queue", "queue to serve (repeatable; none: any queue)")
	fs.StringVar(&s.exec, "exec", "", "command run through /bin/sh -c once per task, payload JSON on stdin (required)")
	fs.IntVar(&s.concurrency, "concurrency", 1, "tasks run at once")
	fs.Var(&s.nonRetryable, "non-retryable-exit", "exit code that fails the task for good (repeatable)")
	fs.IntVar(&s.snoozeExit, "snooze-exit", ExitSnooze, "exit code that snoozes the task for the whole number of seconds the command printed on stdout, without spending an attempt (0: off)")
	fs.DurationVar(&s.drainTimeout, "drain-timeout", client.DefaultDrainTimeout, "on SIGINT, SIGTERM or SIGHUP, how long running commands may finish before they are stopped and their tasks released (a second signal stops them at once)")
	fs.DurationVar(&s.taskTimeout, "task-timeout", 0, "stop a command after this long and fail its task as retryable (0: no limit)")
	fs.StringVar(&s.id, "id", "", "worker id (default hostname-pid)")
	fs.Var(&s.tags, "tag", "a tag this worker has (repeatable)")
	fs.Var(&s.passEnv, "pass-env", "pass this credential of the worker ("+strings.Join(withheldEnv, " or ")+") to the commands, which do not get it otherwise (repeatable)")
}

// runWorker is a generic worker: it runs the --exec command once per task.
// Exit 0 completes the task with the command's standard output (see
// result); exit --snooze-exit (99) with a number of seconds on standard
// output snoozes it; any other exit fails it with the end of standard
// error. Exit 75 and codes not listed in --non-retryable-exit are
// retryable.
//
// The command gets the task's trace context as TRACEPARENT and TRACESTATE
// (when the task has one), and reports progress by writing lines
// "progress <percent> <message>" to file descriptor 3 (TASKMASTER_PROGRESS_FD).
// A command still running when its task's time limit is up is stopped
// (SIGTERM, then SIGKILL), like one cancelled by shutdown.
//
// SIGINT, SIGTERM and SIGHUP drain (see client.Runner.Run); a second one
// stops at once: every command's process group is killed and the tasks are
// released.
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
	for _, name := range s.passEnv {
		if !slices.Contains(withheldEnv, name) {
			return usagef("worker: --pass-env %s: only %s are withheld from commands; the rest of the worker's environment is theirs", name, strings.Join(withheldEnv, " and "))
		}
	}
	if s.drainTimeout == 0 {
		s.drainTimeout = time.Nanosecond // zero means the default to the runner
	}
	logger := slog.New(slog.NewTextHandler(e.Stderr, nil))
	h := &execHandler{
		command: s.exec, nonRetryable: s.nonRetryable, timeout: s.taskTimeout, snoozeExit: s.snoozeExit,
		env: commandEnv(os.Environ(), s.passEnv), forced: make(chan struct{}),
	}
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

	// The first stop signal drains, a second one forces the stop. (main
	// turns SIGINT and SIGTERM into ctx's end too, and a test may end ctx
	// without a signal; SIGHUP, which would otherwise end the worker and
	// leave its commands behind, is caught here only.)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	watched := make(chan struct{})
	defer close(watched)
	go func() {
		for n := 1; ; n++ {
			var sig os.Signal
			select {
			case <-watched:
				return
			case sig = <-sigs:
			}
			if n == 1 {
				logger.Info("stop signal: draining; another one stops at once", "signal", sig.String(), "drain_timeout", s.drainTimeout)
				stop()
				continue
			}
			logger.Warn("second stop signal: killing every command and releasing its task", "signal", sig.String())
			h.force()
			r.StopAndCancel()
		}
	}()

	logger.Info("worker starting", "url", e.url, "exec", s.exec)
	return r.Run(runCtx)
}

// commandEnv is the environment of the commands: the worker's, without its
// credentials (withheldEnv) unless passed, and without any variable the
// task sets itself.
func commandEnv(environ, pass []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(withheldEnv, name) && !slices.Contains(pass, name) {
			continue
		}
		if slices.Contains(taskEnv, name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// taskEnv are the variables each command gets about its task.
var taskEnv = []string{"TASKMASTER_TASK_ID", "TASKMASTER_QUEUE", "TASKMASTER_ATTEMPT", "TASKMASTER_MAX_ATTEMPTS"}

// execHandler runs one command per task.
type execHandler struct {
	command      string
	nonRetryable []int
	timeout      time.Duration
	// snoozeExit is the exit code that asks for a snooze (0: none).
	snoozeExit int
	// env is the commands' environment, the task's variables aside.
	env []string
	// forced is closed by a second stop signal: stopped commands get
	// SIGKILL at once, not after killGrace.
	forced    chan struct{}
	forceOnce sync.Once
}

// force makes every stop kill at once.
func (h *execHandler) force() { h.forceOnce.Do(func() { close(h.forced) }) }

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
	env := append(slices.Clip(h.env),
		"TASKMASTER_TASK_ID="+t.ID,
		"TASKMASTER_QUEUE="+t.Queue,
		"TASKMASTER_ATTEMPT="+strconv.Itoa(t.Attempts),
		"TASKMASTER_MAX_ATTEMPTS="+strconv.Itoa(t.MaxAttempts),
		"TASKMASTER_PROGRESS_FD="+strconv.Itoa(progressFD),
	)
	if t.Trace != nil {
		env = append(env, "TRACEPARENT="+t.Trace.Traceparent)
		if t.Trace.Tracestate != "" {
			env = append(env, "TRACESTATE="+t.Trace.Tracestate)
		}
	}
	progress, err := newProgressPipe(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("progress pipe: %w", err)
	}
	run, err := runCommand(ctx, commandSpec{command: h.command, env: env, stdin: payload, forced: h.forced,
		extraFiles: []*os.File{progress.w}})
	progress.close()
	if err != nil {
		return nil, fmt.Errorf("command could not start: %w", err)
	}
	if ctx.Err() != nil {
		// Stopped by shutdown, a lost lease, a cancellation or
		// --task-timeout: retryable (the runner releases shutdown-stopped
		// tasks and drops lost ones whatever this says).
		if errors.Is(context.Cause(ctx), errTaskTimeout) {
			return nil, fmt.Errorf("command stopped after --task-timeout %s%s", h.timeout, run.stderr.suffix())
		}
		return nil, fmt.Errorf("command stopped: %w%s", context.Cause(ctx), run.stderr.suffix())
	}
	code := run.state.ExitCode()
	switch {
	case code == 0 && run.stdout.overflow:
		return nil, client.NonRetryable(fmt.Errorf("command output exceeds %d bytes", maxStdout))
	case code == 0:
		return result(run.stdout.bytes()), nil
	case h.snoozeExit != 0 && code == h.snoozeExit:
		return nil, snoozeOf(run.stdout.bytes(), h.snoozeExit)
	case code > 0:
		failure := fmt.Errorf("exit status %d%s", code, run.stderr.suffix())
		if code != ExitTempFail && slices.Contains(h.nonRetryable, code) {
			return nil, client.NonRetryable(failure)
		}
		return nil, failure
	default: // killed by a signal
		return nil, fmt.Errorf("command failed: %v%s", run.state, run.stderr.suffix())
	}
}

// commandSpec is one command to run.
type commandSpec struct {
	command string
	env     []string
	stdin   []byte
	// forced, when closed, makes a stop kill at once.
	forced <-chan struct{}
	// extraFiles are given to the command from file descriptor 3 on; the
	// worker's copies are closed once the command has started (or failed
	// to).
	extraFiles []*os.File
}

// commandRun is how a command ended and what it printed.
type commandRun struct {
	state  *os.ProcessState
	stdout *cappedBuffer
	stderr *tailBuffer
}

// runCommand runs c.command through /bin/sh -c in a process group of its
// own (see group), and returns once every process of the group is gone.
// The outcome is the started process's exit status: the command has ended
// when /bin/sh has, whatever its children still do with its output. Those
// left behind are then stopped with the group: SIGTERM, and SIGKILL after
// killGrace. When ctx ends first, the command is stopped the same way.
// Standard output is kept up to maxStdout bytes (the rest is read and
// dropped, so memory stays bounded whatever a command prints), standard
// error up to its last stderrTail bytes.
func runCommand(ctx context.Context, c commandSpec) (*commandRun, error) {
	g, err := newGroup()
	if err != nil {
		return nil, err
	}
	defer g.close()
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer stdinW.Close()
	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		return nil, err
	}
	defer stdoutR.Close()
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdoutW.Close()
		return nil, err
	}
	defer stderrR.Close()

	cmd := exec.Command("/bin/sh", "-c", c.command)
	cmd.Env = c.env
	// Files, not readers or writers: os/exec then copies nothing itself,
	// and Wait returns when the process exits, not when every holder of
	// its output has closed it.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.ExtraFiles = c.extraFiles
	g.join(cmd)
	err = cmd.Start()
	for _, f := range c.extraFiles {
		_ = f.Close() // the command holds its copy now
	}
	stdinR.Close()
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		g.stop(0, c.forced)
		return nil, err
	}
	out := &commandRun{stdout: &cappedBuffer{limit: maxStdout}, stderr: &tailBuffer{limit: stderrTail}}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		out.stdout.readFrom(stdoutR)
	}()
	go func() {
		defer readers.Done()
		_, _ = io.Copy(out.stderr, stderrR)
	}()
	go func() {
		// A command that does not read its input, or stops before the
		// end, fails this write: that is the command's business.
		_, _ = stdinW.Write(c.stdin)
		_ = stdinW.Close()
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		g.stop(killGrace, c.forced)
		<-exited
	}
	out.state = cmd.ProcessState
	// Whatever the command left behind goes with its group.
	g.stop(killGrace, c.forced)
	read := make(chan struct{})
	go func() {
		readers.Wait()
		close(read)
	}()
	select {
	case <-read:
	case <-time.After(outputDrain):
		// A process that left the group (setsid) still holds the output:
		// closing our ends (deferred) ends the readers.
		stdoutR.Close()
		stderrR.Close()
		<-read
	}
	return out, nil
}

// outputDrain is how long the output of a command whose group is gone is
// still read before the worker closes it.
const outputDrain = time.Second

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

// result is the task's result from the command's output: JSON when
// PostgreSQL can store it as it is; else, when it is UTF-8 text without a
// NUL byte, that text as a JSON string (one trailing line break dropped);
// else (binary output, invalid UTF-8, a NUL byte) the whole output encoded
// as {"stdout_base64": "<base64, RFC 4648 with padding>"}. Empty output is
// null. So any output is a result: the server refuses none of these.
func result(out []byte) any {
	trimmed := bytes.TrimSpace(out)
	switch {
	case len(trimmed) == 0:
		return nil
	case storableJSON(trimmed):
		return json.RawMessage(trimmed)
	case utf8.Valid(out) && bytes.IndexByte(out, 0) < 0:
		return string(bytes.TrimRight(out, "\r\n"))
	default:
		return encodedOutput{StdoutBase64: base64.StdEncoding.EncodeToString(out)}
	}
}

// encodedOutput is the result of a command whose output is not text.
type encodedOutput struct {
	StdoutBase64 string `json:"stdout_base64"`
}

// storableJSON reports whether the server stores raw as the JSON it is,
// by the rule it applies (PostgreSQL's jsonb: no \u0000, no unpaired
// surrogate escape, numbers in numeric's range, bounded depth and size).
func storableJSON(raw []byte) bool {
	_, err := postgres.JSONStoredSize(raw)
	return err == nil
}

// cappedBuffer keeps the first limit bytes it reads and notes that more
// came: it reads everything, so that the command is not blocked on a full
// pipe, and keeps no more than limit, whatever the command prints.
type cappedBuffer struct {
	buf      []byte
	limit    int
	overflow bool
}

// readFrom reads r to its end (or its first error).
func (b *cappedBuffer) readFrom(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if room := b.limit - len(b.buf); n > room {
			b.overflow = true
			n = max(room, 0)
		}
		b.buf = append(b.buf, chunk[:n]...)
		if err != nil {
			return
		}
	}
}

// bytes returns what was kept.
func (b *cappedBuffer) bytes() []byte { return b.buf }

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
