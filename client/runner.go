package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// HandlerFunc processes one task. Its result, which encoding/json must be
// able to marshal, completes the task (a Next also enqueues the next
// stage's tasks); an error fails it (retried after backoff while attempts
// remain, unless wrapped with NonRetryable), and Snooze(d) as the error puts
// it back for d without spending an attempt. ctx is
// cancelled when the runner stops waiting for the handler; context.Cause(ctx)
// says why: ErrShutdown, ErrTaskLost, ErrTaskCancelled, ErrTaskTimeout or
// ErrTaskTimeLimit. The handler may report its progress with t.Progress.
type HandlerFunc func(ctx context.Context, t Task) (result any, err error)

// Next is a handler result that completes the task with Result and
// creates Enqueue in the same transaction, or neither: the step to the next
// stage of a pipeline (see CompleteParams.Enqueue). An enqueue the server
// refuses (invalid, or a key without the produce scope) fails the task as
// non-retryable, like a result it refuses.
type Next struct {
	// Result is the task's result, as a handler would return it.
	Result any
	// Enqueue are the tasks to create.
	Enqueue []SubmitParams
}

var (
	// ErrShutdown is the cause of a handler context cancelled because the
	// runner is shutting down and the drain timeout passed.
	ErrShutdown = errors.New("taskmaster: runner shutting down")
	// ErrTaskLost is the cause of a handler context cancelled because the
	// server says this worker no longer holds the task (its lease ran out,
	// it was taken back or given to another worker). Whatever the handler
	// returns is dropped: the server would refuse its report.
	ErrTaskLost = errors.New("taskmaster: task lost")
	// ErrTaskCancelled is the cause of a handler context cancelled because
	// an operator cancelled the running task. The runner fails the task
	// (it ends DEAD, reason cancelled) unless the handler still succeeds.
	ErrTaskCancelled = errors.New("taskmaster: task cancelled by an operator")
	// ErrTaskTimeout is the cause of a handler context cancelled because the
	// handler ran past RunnerConfig.TaskTimeout. The runner fails the task
	// (retried while attempts remain) unless the handler still succeeds.
	ErrTaskTimeout = errors.New("taskmaster: task timed out")
	// ErrTaskTimeLimit is the cause of a handler context cancelled because
	// the task's time limit on its attempt (Task.TimeoutAt: the task's
	// TimeoutSeconds, else its queue's default) is up. The server ends the
	// attempt itself (outcome timed_out, retried after backoff or DEAD
	// exhausted), so whatever the handler returns is dropped, as for a lost
	// task.
	ErrTaskTimeLimit = errors.New("taskmaster: the task's time limit is up")
)

// NonRetryable marks err as not worth retrying: the runner fails the task
// with retryable=false, so it goes straight to DEAD (reason non_retryable).
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryableError{err: err}
}

type nonRetryableError struct{ err error }

func (e *nonRetryableError) Error() string { return e.err.Error() }
func (e *nonRetryableError) Unwrap() error { return e.err }

// IsNonRetryable reports whether err was wrapped with NonRetryable.
func IsNonRetryable(err error) bool {
	var nr *nonRetryableError
	return errors.As(err, &nr)
}

// RunnerConfig configures a Runner. The zero value of every field but
// Concurrency's neighbours is a sensible default.
type RunnerConfig struct {
	// WorkerID is the worker's stable id; DefaultWorkerID() when empty.
	WorkerID string
	// Queues the worker serves (none: any queue).
	Queues []string
	// Tags the worker has.
	Tags []string
	// Concurrency is the most tasks handled at once (default 1, at most
	// MaxHeartbeatTasks, and cut to the server's Registration.MaxHeartbeatTasks
	// when that is lower: every heartbeat lists every task held, and the
	// server refuses longer lists). Claims ask for at most the free slots.
	Concurrency int
	// DrainTimeout is how long shutdown waits for in-flight handlers before
	// cancelling their contexts (default 30 s).
	DrainTimeout time.Duration
	// LeaseSeconds is the lease each claim asks for (0: the server's
	// default, 300 s unless configured). Every heartbeat lists the runner's
	// in-flight tasks, which renews their leases, so a lease only has to
	// outlast a few missed heartbeats, not the longest handler: a short one
	// hands the tasks of a runner that stopped beating to others sooner.
	LeaseSeconds int
	// TaskTimeout, when positive, bounds each handler: past it, the
	// handler's context is cancelled (cause ErrTaskTimeout) and the task is
	// failed, retryable, when the handler returns an error or does not
	// return within CancelGrace. Without it a handler that never returns
	// keeps its task RUNNING: its lease is renewed with every heartbeat.
	TaskTimeout time.Duration
	// CancelGrace is how long the runner waits for a handler whose context
	// it cancelled (shutdown, lost, cancelled or timed-out task) before it
	// stops waiting: it then fails the task on the handler's behalf (or, for
	// a lost task, drops it) and frees the handler's slot (default 5 s).
	CancelGrace time.Duration
	// ClaimWait is how long a claim that finds nothing waits on the server
	// for a task (a long poll, see ClaimParams.Wait), so that a task
	// submitted to an idle runner starts within milliseconds. Default
	// DefaultClaimWait; at most MaxClaimWait, and cut to DrainTimeout (a
	// stopping runner lets its waiting claim run out, see Run). Negative, or
	// under 100 ms after the cut: no long poll; an empty claim is followed
	// by an idle wait (PollInterval doubling to MaxIdleInterval), as with
	// servers before wait_ms.
	ClaimWait time.Duration
	// PollInterval is the first wait after a failed claim, or after an
	// empty one that did not wait (no long poll, or a server shutting
	// down); it doubles per such claim up to MaxIdleInterval (default
	// 100 ms).
	PollInterval time.Duration
	// MaxIdleInterval caps the wait between those claims (default 5 s).
	MaxIdleInterval time.Duration
	// HeartbeatInterval overrides the interval the server asks for at
	// registration (0: as the server asks).
	HeartbeatInterval time.Duration
	// ReportTimeout bounds one complete or fail report, retries included
	// (default 30 s). Reports go through even while shutting down.
	ReportTimeout time.Duration
	// HandlerContext, when set, derives each handler's context from the
	// runner's and the task: clientotel.TaskContext starts it with the
	// task's trace (Task.Trace), so the handler's spans continue the trace
	// the task was submitted under.
	HandlerContext func(ctx context.Context, t Task) context.Context
	// Logger receives the runner's logs (default slog.Default()).
	Logger *slog.Logger
}

// Runner defaults.
const (
	DefaultConcurrency     = 1
	DefaultDrainTimeout    = 30 * time.Second
	DefaultCancelGrace     = 5 * time.Second
	DefaultClaimWait       = 5 * time.Second
	DefaultPollInterval    = 100 * time.Millisecond
	DefaultMaxIdleInterval = 5 * time.Second
	DefaultReportTimeout   = 30 * time.Second
	// maxClaimLimit is the most tasks one claim may ask for.
	maxClaimLimit = 1000
	// minClaimWait is the shortest long poll the runner makes.
	minClaimWait = 100 * time.Millisecond
)

func (c RunnerConfig) withDefaults() RunnerConfig {
	if c.WorkerID == "" {
		c.WorkerID = DefaultWorkerID()
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.ClaimWait == 0 {
		c.ClaimWait = DefaultClaimWait
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.MaxIdleInterval == 0 {
		c.MaxIdleInterval = DefaultMaxIdleInterval
	}
	if c.ReportTimeout == 0 {
		c.ReportTimeout = DefaultReportTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether the config (defaults applied) can be used.
func (c RunnerConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Concurrency < 1 || c.Concurrency > MaxHeartbeatTasks {
		errs = append(errs, fmt.Errorf("Concurrency must be between 1 and %d: every heartbeat lists every task the worker holds, and the server refuses longer lists", MaxHeartbeatTasks))
	}
	if c.DrainTimeout < 0 || c.CancelGrace < 0 || c.HeartbeatInterval < 0 || c.ReportTimeout < 0 || c.TaskTimeout < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.LeaseSeconds < 0 || c.LeaseSeconds > MaxLeaseSeconds {
		errs = append(errs, fmt.Errorf("LeaseSeconds must be between 0 and %d", MaxLeaseSeconds))
	}
	if c.PollInterval < 0 || c.MaxIdleInterval < c.PollInterval {
		errs = append(errs, errors.New("need 0 <= PollInterval <= MaxIdleInterval"))
	}
	if c.ClaimWait > MaxClaimWait {
		errs = append(errs, fmt.Errorf("ClaimWait must be at most %s", MaxClaimWait))
	}
	if len(c.WorkerID) > 128 || strings.IndexFunc(c.WorkerID, func(r rune) bool { return !workerIDRune(r) }) >= 0 {
		errs = append(errs, errors.New("WorkerID must be 1-128 characters of [A-Za-z0-9._:-]"))
	}
	return errors.Join(errs...)
}

func workerIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == ':' || r == '-'
}

// DefaultWorkerID returns "<hostname>-<pid>", with characters the server
// does not accept in ids replaced by '-': stable for the life of the
// process, distinct between processes on one host.
func DefaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	host = strings.Map(func(r rune) rune {
		if workerIDRune(r) {
			return r
		}
		return '-'
	}, host)
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > 128 {
		host = host[:128-len(pid)]
	}
	return host + pid
}

// Runner is a worker: it registers, heartbeats, claims tasks up to its
// free concurrency, runs the handler on each, and reports every outcome
// with the task's lease. Run it once.
//
// It speaks the lease protocol: every heartbeat lists the tasks in flight
// under their leases (renewing the leases, and letting the server take back
// a task whose claim's answer never arrived), and the runner acts on the
// answer: a lost task's handler is cancelled (cause ErrTaskLost) and its
// outcome dropped; a cancelled task's handler is cancelled (cause
// ErrTaskCancelled) and the task failed; on drain the runner claims no
// more tasks and finishes those it holds (Run still returns only when its
// context ends). Against a server without leases (one that refuses task
// lists in heartbeats) it falls back to plain heartbeats.
type Runner struct {
	client  *Client
	cfg     RunnerConfig
	handler HandlerFunc
	log     *slog.Logger

	slots chan struct{} // a token per task held; sized by Run once registered

	regMu    sync.Mutex
	interval time.Duration // heartbeat interval in force
	listCap  int           // the server's heartbeat list cap (0: not said)

	mu       sync.Mutex
	started  bool
	inflight map[LeaseRef]*job // by task and lease: what heartbeats list

	wg      sync.WaitGroup // task goroutines
	abandon chan struct{}  // closed when shutdown stops waiting for handlers

	plainBeats atomic.Bool   // the server takes no task lists: beat without
	drainOnce  sync.Once     // closes draining
	draining   chan struct{} // closed once the server asked the runner to drain
}

// job is one task in flight.
type job struct {
	task   Task
	cancel context.CancelCauseFunc // cancels this task's handler context

	once  sync.Once
	stop  chan struct{} // closed when the runner gives up on the handler
	cause error         // why stop was closed; set before
}

// halt cancels the handler with cause and tells work to stop waiting for
// it; only the first call counts. It reports whether this call did it. The
// halt is visible (halted) before the handler's context ends, so work never
// takes the outcome of a handler that returned because of it for a normal
// one (which, for a lost task, would report what must be dropped).
func (j *job) halt(cause error) bool {
	first := false
	j.once.Do(func() {
		j.cause = cause
		close(j.stop)
		j.cancel(cause)
		first = true
	})
	return first
}

// halted returns the cause of halt, or nil when the job was not halted.
func (j *job) halted() error {
	select {
	case <-j.stop:
		return j.cause
	default:
		return nil
	}
}

// NewRunner returns a runner that handles tasks with handler.
func NewRunner(c *Client, cfg RunnerConfig, handler HandlerFunc) (*Runner, error) {
	if c == nil || handler == nil {
		return nil, errors.New("taskmaster runner: client and handler are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("taskmaster runner: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Runner{
		client:   c,
		cfg:      cfg,
		handler:  handler,
		log:      cfg.Logger.With("worker_id", cfg.WorkerID),
		inflight: map[LeaseRef]*job{},
		abandon:  make(chan struct{}),
		draining: make(chan struct{}),
	}, nil
}

// WorkerID returns the id the runner registers under.
func (r *Runner) WorkerID() string { return r.cfg.WorkerID }

// Draining reports whether the server asked the runner to drain: it claims
// no more tasks.
func (r *Runner) Draining() bool {
	select {
	case <-r.draining:
		return true
	default:
		return false
	}
}

// InFlight returns the tasks being handled now.
func (r *Runner) InFlight() []Task {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Task, 0, len(r.inflight))
	for _, j := range r.inflight {
		out = append(out, j.task)
	}
	return out
}

// Run works until ctx is cancelled, then drains: it stops claiming, waits
// up to DrainTimeout for in-flight handlers, cancels the contexts of those
// still running (cause ErrShutdown), waits up to CancelGrace more, and
// fails the tasks whose handlers have not returned as retryable so they
// are requeued. It keeps heartbeating until the drain is over. It returns
// nil after a drain, or an error when the worker cannot register (a 4xx).
//
// A claim waiting on the server when ctx is cancelled is not cut off: it
// runs out (at most ClaimWait, which is why that is cut to DrainTimeout)
// and the tasks it brings are handled within the drain, so an idle runner
// stops within ClaimWait.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("taskmaster runner: Run called twice")
	}
	r.started = true
	r.mu.Unlock()

	if err := r.register(ctx, true); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// Never hold more tasks than one heartbeat may list: the slots are
	// sized once, before anything claims.
	capacity := r.cfg.Concurrency
	if limit := r.heartbeatListCap(); limit < capacity {
		r.log.Warn("Concurrency is more than the server lets a heartbeat list; holding fewer tasks at once", "concurrency", capacity, "max_heartbeat_tasks", limit)
		capacity = limit
	}
	r.slots = make(chan struct{}, capacity)
	r.log.Info("worker registered", "queues", r.cfg.Queues, "concurrency", capacity, "heartbeat_interval", r.heartbeatInterval())
	if lease := time.Duration(r.cfg.LeaseSeconds) * time.Second; lease > 0 && lease < 3*r.heartbeatInterval() {
		r.log.Warn("LeaseSeconds is under three heartbeat intervals: a late heartbeat may let a lease run out", "lease", lease)
	}

	// Handlers and reports outlive ctx (the drain); they keep its values.
	detached := context.WithoutCancel(ctx)
	handlerCtx, cancelHandlers := context.WithCancelCause(detached)
	defer cancelHandlers(ErrShutdown)
	beatCtx, stopBeats := context.WithCancel(detached)
	var beats sync.WaitGroup
	beats.Add(1)
	go func() {
		defer beats.Done()
		r.heartbeatLoop(beatCtx)
	}()

	r.claimLoop(ctx, handlerCtx)
	r.drain(cancelHandlers)

	stopBeats()
	beats.Wait()
	r.log.Info("worker stopped")
	return nil
}

// register registers (or re-registers) the worker. The first registration
// retries transient failures until ctx ends; a 4xx is returned.
func (r *Runner) register(ctx context.Context, first bool) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	wait := r.cfg.PollInterval
	for {
		reg, err := r.client.Register(ctx, RegisterParams{ID: r.cfg.WorkerID, Queues: r.cfg.Queues, Tags: r.cfg.Tags})
		if err == nil {
			r.interval = reg.HeartbeatInterval()
			r.listCap = reg.MaxHeartbeatTasks
			return nil
		}
		if p, ok := AsProblem(err); ok && p.Status < 500 {
			return fmt.Errorf("taskmaster runner: register %s: %w", r.cfg.WorkerID, err)
		}
		if !first {
			return err
		}
		r.log.Warn("register failed; retrying", "error", err, "in", wait)
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(wait*2, r.cfg.MaxIdleInterval)
	}
}

func (r *Runner) heartbeatInterval() time.Duration {
	if r.cfg.HeartbeatInterval > 0 {
		return r.cfg.HeartbeatInterval
	}
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.interval <= 0 {
		return 10 * time.Second
	}
	return r.interval
}

// heartbeatListCap is the most tasks a heartbeat may list: the server's
// cap, or MaxHeartbeatTasks when it did not say.
func (r *Runner) heartbeatListCap() int {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.listCap <= 0 {
		return MaxHeartbeatTasks
	}
	return r.listCap
}

// heartbeatLoop beats until ctx ends, listing the tasks in flight, and acts
// on each answer. A worker the server declared dead (or forgot) registers
// again: its tasks were taken back, and their late reports will be refused
// as lease-lost.
func (r *Runner) heartbeatLoop(ctx context.Context) {
	interval := r.heartbeatInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		res, err := r.beat(bctx)
		cancel()
		switch {
		case err == nil:
			r.act(res)
		case IsWorkerDead(err) || IsWorkerNotFound(err):
			r.reregister(ctx, err)
		case ctx.Err() != nil:
			return
		default:
			r.log.Warn("heartbeat failed", "error", err)
		}
		if next := r.heartbeatInterval(); next != interval {
			interval = next
			t.Reset(interval)
		}
	}
}

// beat sends one heartbeat listing the tasks in flight, or a plain one to a
// server that takes no task lists (it answers the list as an unknown field).
func (r *Runner) beat(ctx context.Context) (*HeartbeatResult, error) {
	if r.plainBeats.Load() {
		return r.client.Heartbeat(ctx, r.cfg.WorkerID)
	}
	res, err := r.client.HeartbeatTasks(ctx, r.cfg.WorkerID, r.held())
	if isType(err, ProblemMalformedRequest) {
		r.plainBeats.Store(true)
		r.log.Warn("the server takes no task lists in heartbeats (it has no leases); sending plain heartbeats", "error", err)
		return r.client.Heartbeat(ctx, r.cfg.WorkerID)
	}
	return res, err
}

// held lists the tasks in flight that the runner still holds (not those the
// server said it lost), under their leases.
func (r *Runner) held() []LeaseRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LeaseRef, 0, len(r.inflight))
	for ref, j := range r.inflight {
		if !errors.Is(j.halted(), ErrTaskLost) {
			out = append(out, ref)
		}
	}
	return out
}

// act carries out a heartbeat's answer: it halts the lost and cancelled
// tasks' handlers and stops claiming on drain.
func (r *Runner) act(res *HeartbeatResult) {
	for _, ref := range res.Lost {
		if j := r.job(ref); j != nil && j.halt(ErrTaskLost) {
			r.log.Warn("task lost: the server no longer gives this worker the task; cancelling its handler and dropping its outcome", "task_id", ref.ID)
		}
	}
	for _, ref := range res.Cancel {
		if j := r.job(ref); j != nil && j.halt(ErrTaskCancelled) {
			r.log.Info("task cancelled by an operator; cancelling its handler", "task_id", ref.ID)
		}
	}
	if res.Drain {
		r.drainOnce.Do(func() {
			r.log.Info("the server asked this worker to drain: claiming no more tasks")
			close(r.draining)
		})
	}
}

func (r *Runner) job(ref LeaseRef) *job {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inflight[ref]
}

func (r *Runner) reregister(ctx context.Context, cause error) {
	r.log.Warn("the server no longer knows this worker as alive; registering again", "error", cause)
	if err := r.register(ctx, false); err != nil && ctx.Err() == nil {
		r.log.Error("register again failed", "error", err)
	}
}

// claimLoop claims while ctx lives: it waits for a free slot, asks for as
// many tasks as there are free slots, and starts a goroutine per task. An
// empty queue is waited out on the server (a long-poll claim), not here.
func (r *Runner) claimLoop(ctx, handlerCtx context.Context) {
	idle := time.Duration(0)
	wait := r.claimWait()
	for ctx.Err() == nil {
		// One free slot at least, then as many more as are free; none once
		// draining (until ctx ends, when Run drains as on any shutdown).
		select {
		case <-ctx.Done():
			return
		case <-r.draining:
			<-ctx.Done()
			return
		case r.slots <- struct{}{}:
		}
		n := 1
	more:
		for n < min(cap(r.slots), maxClaimLimit) {
			select {
			case r.slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		if ctx.Err() != nil || r.Draining() { // the select above may pick a slot over either
			for range n {
				<-r.slots
			}
			continue
		}
		// The claim is not cancelled by ctx, waiting or not: a claim cut
		// off after the server committed it would leave its tasks held by
		// no one until this worker is declared dead. So shutdown lets a
		// waiting claim run out (ClaimWait is at most DrainTimeout), and
		// claimed tasks are handled (within the drain) even when ctx ended
		// meanwhile. The timeout only guards against a server that never
		// answers.
		begin := time.Now()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait+r.cfg.ReportTimeout)
		tasks, err := r.client.Claim(cctx, ClaimParams{WorkerID: r.cfg.WorkerID, Limit: n, Wait: wait, LeaseSeconds: r.cfg.LeaseSeconds})
		cancel()
		for range n - len(tasks) {
			<-r.slots
		}
		switch {
		case err != nil && (IsWorkerDead(err) || IsWorkerNotFound(err)):
			r.reregister(ctx, err)
			continue
		case err != nil:
			r.log.Warn("claim failed", "error", err)
			idle = r.nextIdle(idle)
			sleep(ctx, idle)
			continue
		case len(tasks) == 0 && wait > 0 && time.Since(begin) >= wait:
			// The server waited the whole ClaimWait for nothing: ask again.
			idle = 0
			continue
		case len(tasks) == 0:
			// No long poll, or the server answered before the wait was over
			// with nothing (it is shutting down): wait here instead.
			idle = r.nextIdle(idle)
			sleep(ctx, idle)
			continue
		}
		idle = 0
		for _, t := range tasks {
			r.start(handlerCtx, t)
		}
	}
}

// claimWait is the long-poll wait of a claim (0: none). Long polls that
// run out are followed by the next at once, so very short ones would make
// an idle runner claim more often than it does without them.
func (r *Runner) claimWait() time.Duration {
	w := min(r.cfg.ClaimWait, r.cfg.DrainTimeout)
	if w < minClaimWait {
		return 0
	}
	return w
}

func (r *Runner) nextIdle(idle time.Duration) time.Duration {
	if idle == 0 {
		return r.cfg.PollInterval
	}
	return min(idle*2, r.cfg.MaxIdleInterval)
}

// start runs t on a goroutine holding one slot. The task is in flight (and
// listed by heartbeats) until its outcome is reported or dropped.
func (r *Runner) start(handlerCtx context.Context, t Task) {
	received := time.Now()
	if r.cfg.HandlerContext != nil {
		handlerCtx = r.cfg.HandlerContext(handlerCtx, t)
	}
	taskCtx, cancel := context.WithCancelCause(handlerCtx)
	t.progress = &progressReporter{client: r.client, workerID: r.cfg.WorkerID, reportTimeout: r.cfg.ReportTimeout}
	j := &job{task: t, cancel: cancel, stop: make(chan struct{})}
	ref := t.Ref()
	r.mu.Lock()
	r.inflight[ref] = j
	r.mu.Unlock()
	var timeout, limit *time.Timer
	if r.cfg.TaskTimeout > 0 {
		timeout = time.AfterFunc(r.cfg.TaskTimeout, func() {
			if j.halt(ErrTaskTimeout) {
				r.log.Warn("handler ran past TaskTimeout; cancelling it", "task_id", t.ID, "timeout", r.cfg.TaskTimeout)
			}
		})
	}
	if d, ok := t.timeLimit(); ok {
		// The server's clock ended the attempt at TimeoutAt; the claim's
		// answer came after ClaimedAt, so counting the limit from its
		// arrival stops the handler no earlier than the server does.
		limit = time.AfterFunc(max(time.Until(received.Add(d)), 0), func() {
			if j.halt(ErrTaskTimeLimit) {
				r.log.Warn("the task's time limit is up; cancelling its handler and dropping its outcome", "task_id", t.ID, "limit", d)
			}
		})
	}
	r.wg.Add(1)
	go func() {
		defer func() {
			if timeout != nil {
				timeout.Stop()
			}
			if limit != nil {
				limit.Stop()
			}
			cancel(nil)
			r.mu.Lock()
			delete(r.inflight, ref)
			r.mu.Unlock()
			<-r.slots
			r.wg.Done()
		}()
		r.work(taskCtx, j)
	}()
}

// outcome is what a handler returned.
type outcome struct {
	result any
	err    error
}

// work runs the handler and reports its outcome. When the runner halts the
// job (lost, cancelled, timed out) it gives the handler CancelGrace to
// return; when shutdown abandons the handler, or it does not return in that
// grace, the runner stops waiting: the task is failed as retryable on the
// handler's behalf (a lost one is dropped) and the handler's eventual
// outcome is dropped.
func (r *Runner) work(ctx context.Context, j *job) {
	t := j.task
	done := make(chan outcome, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- outcome{err: fmt.Errorf("handler panic: %v", v)}
			}
		}()
		res, err := r.handler(ctx, t)
		done <- outcome{result: res, err: err}
	}()
	var o outcome
	returned := true
	select {
	case o = <-done:
	case <-j.stop:
		grace := time.NewTimer(r.cfg.CancelGrace)
		select {
		case o = <-done:
		case <-grace.C:
			returned = false
		case <-r.abandon:
			returned = false
		}
		grace.Stop()
	case <-r.abandon:
		select {
		case o = <-done:
		default:
			returned = false
		}
	}
	cause := j.halted()
	switch {
	case errors.Is(cause, ErrTaskLost), errors.Is(cause, ErrTaskTimeLimit):
		r.log.Warn("dropping the outcome of a lost task", "task_id", t.ID, "handler_returned", returned, "cause", cause)
		return
	case cause != nil && !returned:
		r.log.Warn("handler did not return after its context was cancelled; failing its task", "task_id", t.ID, "cause", cause)
		r.fail(t, cause.Error()+": the handler did not return", false)
		return
	case cause != nil && o.err != nil:
		r.fail(t, cause.Error()+": "+o.err.Error(), false)
		return
	case !returned:
		r.log.Warn("handler did not return after its context was cancelled; requeueing its task", "task_id", t.ID)
		r.fail(t, "worker shut down before the handler finished", false)
		return
	}
	r.report(ctx, j, o)
}

func (r *Runner) report(ctx context.Context, j *job, o outcome) {
	t := j.task
	if cause := j.halted(); errors.Is(cause, ErrTaskLost) || errors.Is(cause, ErrTaskTimeLimit) {
		r.log.Warn("dropping the outcome of a lost task", "task_id", t.ID, "handler_returned", true, "cause", cause)
		return
	}
	if o.err == nil {
		var enqueue []SubmitParams
		switch n := o.result.(type) {
		case Next:
			o.result, enqueue = n.Result, n.Enqueue
		case *Next:
			if n != nil {
				o.result, enqueue = n.Result, n.Enqueue
			}
		}
		result, err := marshalValue(o.result)
		if err != nil {
			r.fail(t, "handler result cannot be encoded as JSON: "+err.Error(), true)
			return
		}
		if _, err := (CompleteItem{Enqueue: enqueue}).request(); err != nil {
			r.fail(t, "the handler's enqueue cannot be sent: "+err.Error(), true)
			return
		}
		rctx, cancel := r.reportContext()
		defer cancel()
		_, err = r.client.Complete(rctx, t.ID, CompleteParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Result: result, Enqueue: enqueue})
		if p, ok := AsProblem(err); ok && p.Status < 500 && !heldElsewhere(err) {
			// The server refused the result itself (too large, say) or the
			// enqueue; it would refuse it again, so the task cannot succeed
			// this way.
			r.fail(t, "the server rejected the handler's result: "+err.Error(), true)
			return
		}
		r.reported(t, "complete", err)
		return
	}
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, ErrShutdown) {
		// Cancelled by shutdown: whatever the handler says, the task did not
		// fail on its merits.
		r.fail(t, "worker shut down: "+o.err.Error(), false)
		return
	}
	if d, ok := SnoozeDelay(o.err); ok {
		r.snooze(t, d)
		return
	}
	r.fail(t, o.err.Error(), IsNonRetryable(o.err))
}

// snooze puts t back for d, without spending its attempt. A snooze the
// server refuses as invalid (a delay out of range) fails the task,
// retryable, so that it is not lost.
func (r *Runner) snooze(t Task, d time.Duration) {
	rctx, cancel := r.reportContext()
	defer cancel()
	_, err := r.client.Snooze(rctx, t.ID, SnoozeParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Delay: d})
	if IsValidation(err) {
		r.fail(t, "the server refused the handler's snooze: "+err.Error(), false)
		return
	}
	r.reported(t, "snooze", err)
}

func (r *Runner) fail(t Task, msg string, nonRetryable bool) {
	rctx, cancel := r.reportContext()
	defer cancel()
	_, err := r.client.Fail(rctx, t.ID, FailParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Error: msg, NonRetryable: nonRetryable})
	r.reported(t, "fail", err)
}

func (r *Runner) reportContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.cfg.ReportTimeout)
}

// reported logs a report's failure. A task no longer held (lease lost,
// already finished, deleted) is dropped: the report is never retried.
func (r *Runner) reported(t Task, what string, err error) {
	switch {
	case err == nil:
	case heldElsewhere(err):
		r.log.Warn("task no longer held by this worker; dropping it", "task_id", t.ID, "report", what, "error", err)
	default:
		r.log.Error("report failed", "task_id", t.ID, "report", what, "error", err)
	}
}

// heldElsewhere reports whether a report's error says the worker no longer
// holds the task: another worker or lease has it, it is no longer RUNNING,
// or it is gone.
func heldElsewhere(err error) bool {
	return IsLeaseLost(err) || IsInvalidTransition(err) || isType(err, ProblemTaskNotFound)
}

// drain waits for in-flight tasks: up to DrainTimeout, then cancels their
// contexts, up to CancelGrace more, then abandons the rest (their tasks
// are failed as retryable).
func (r *Runner) drain(cancelHandlers context.CancelCauseFunc) {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	if n := len(r.InFlight()); n > 0 {
		r.log.Info("draining", "in_flight", n, "timeout", r.cfg.DrainTimeout)
	}
	if waitOr(done, r.cfg.DrainTimeout) {
		return
	}
	r.log.Warn("drain timeout; cancelling handlers", "in_flight", len(r.InFlight()))
	cancelHandlers(ErrShutdown)
	if waitOr(done, r.cfg.CancelGrace) {
		return
	}
	close(r.abandon)
	<-done
}

// waitOr waits for done up to d and reports whether it closed.
func waitOr(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
