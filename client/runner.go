package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
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
// refuses as invalid (422) fails the task as non-retryable, like a result
// it refuses; a key without the produce scope (403) stops the runner, as
// every authentication and authorization problem does (see Run).
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
	// ErrTaskLost is the cause of a handler context cancelled because this
	// worker no longer holds the task: the server says so (its lease ran
	// out, it was taken back or given to another worker), or the runner
	// could not renew its lease for three quarters of it, by its own clock,
	// so that the handler stops before the server gives the task to
	// another worker. Whatever the handler returns is dropped: the server
	// would refuse its report.
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
	// The runner heartbeats at least every third of the shortest lease it
	// holds, whatever the heartbeat interval; a handler whose lease it
	// could not renew for three quarters of it (counted on its own clock
	// from the sending of the last heartbeat that renewed it) is stopped
	// with ErrTaskLost.
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
	// a lost task, drops it; on shutdown, releases it). The handler keeps
	// its slot until it returns, so that never more than Concurrency
	// handlers run at once (default 5 s).
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
	// registration (0: as the server asks). The runner beats more often
	// when it holds a lease shorter than three intervals (see
	// LeaseSeconds).
	HeartbeatInterval time.Duration
	// ReportTimeout bounds the delivery of one report (complete, fail,
	// snooze, or the release of a drain), retries included (default 30 s).
	// A report that fails with a transport error, a 5xx, a 408 or a 429 is
	// retried (after Retry-After) until it is accepted, the server says the
	// task is no longer this worker's, or ReportTimeout runs out; the task
	// stays listed by the heartbeats meanwhile, which renews its lease.
	// Past it the runner gives up on the report and the server takes the
	// task back. Reports go through even while shutting down. A report
	// that rode a claim (see Runner) gets its ReportTimeout on its own
	// once the claim did not deliver it.
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
// A completion or failure whose handler returns while the runner is
// waiting for a free slot rides its next claim, sent at once
// (ClaimReporting): with Concurrency 1, every task costs one request
// instead of two. Any other time (a claim under way, a long poll waiting
// on the server, a stopping runner), and for a result that enqueues
// (Next), the report goes on its own at once; a report never waits for a
// claim. A claim that fails, or does not deliver the report, leaves it to
// go on its own, as below. Snoozes, releases and progress always go on
// their own.
//
// It speaks the lease protocol: every heartbeat lists the tasks in flight
// under their leases (renewing the leases, and letting the server take back
// a task whose claim's answer never arrived), and the runner acts on the
// answer: a lost task's handler is cancelled (cause ErrTaskLost) and its
// outcome dropped; a cancelled task's handler is cancelled (cause
// ErrTaskCancelled) and the task failed; on drain the runner claims no
// more tasks and finishes those it holds (Run still returns only when its
// context ends). A handler whose lease the runner could not renew in time
// is cancelled (ErrTaskLost) by the runner's own clock, before the server
// can give the task to another worker. Against a server without leases
// (one that refuses task lists in heartbeats) it falls back to plain
// heartbeats.
//
// What it guarantees, and where it stops:
//   - a report (complete, fail, snooze) is retried through transport
//     errors, 5xx, 408 and 429 (after Retry-After) until it is accepted, the
//     server says the task is no longer this worker's, or ReportTimeout
//     runs out (a report that rode a claim the client gave up on, after
//     its usual retries, starts this on its own); meanwhile the task stays
//     listed by the heartbeats;
//   - only the server's answers about the result itself (422, 413) fail a
//     task the handler completed (as non-retryable); 401 and 403 stop the
//     runner (Run returns the problem) without failing or releasing tasks;
//   - never more than Concurrency handlers run at once: a handler keeps its
//     slot until it returns, even past TaskTimeout and CancelGrace;
//   - on shutdown, tasks whose handlers did not finish are released (back
//     to PENDING without spending an attempt), all in one request.
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
	// claims are the request ids of the claims sent and not yet answered
	// (or given up): heartbeats name them, so that the server does not take
	// a task back as orphaned because its claim's answer is late.
	claims   map[string]bool
	releases []*job // tasks the drain hands back (still in flight)
	stopRun  context.CancelCauseFunc
	fatalErr error // why the runner stopped on its own (401, 403)
	// carryOpen says the claim loop takes reports to carry on its next
	// claim (see ride); carryQueue holds those offered since it last took
	// them.
	carryOpen  bool
	carryQueue []*carried

	wg      sync.WaitGroup // task goroutines
	abandon chan struct{}  // closed when shutdown stops waiting for handlers

	plainBeats atomic.Bool   // the server takes no task lists: beat without
	leaseBeat  atomic.Int64  // a third of the shortest lease held so far (ns; 0: none)
	retune     chan struct{} // tells the heartbeat loop leaseBeat shrank
	drainOnce  sync.Once     // closes draining
	draining   chan struct{} // closed once the server asked the runner to drain
	hurryOnce  sync.Once     // closes hurry
	hurry      chan struct{} // closed by StopAndCancel: no waiting for DrainTimeout
	fatalOnce  sync.Once
	carryReady chan struct{} // wakes the claim loop: a report to carry (one token)
	noCarry    atomic.Bool   // the server takes no reports on claims
}

// job is one task in flight.
type job struct {
	task   Task
	cancel context.CancelCauseFunc // cancels this task's handler context

	once  sync.Once
	stop  chan struct{} // closed when the runner gives up on the handler
	cause error         // why stop was closed; set before

	returned chan struct{} // closed when the handler returned
	lease    *leaseWatch   // nil when the lease's length is unknown
	timeout  *time.Timer   // halts the handler past TaskTimeout (nil: none)
	limit    *time.Timer   // halts the handler at the task's time limit (nil: none)

	// reporting is set once the runner is done with the handler: its
	// outcome is being reported (or dropped), which the report's answer
	// decides, not the heartbeats (see act).
	reporting atomic.Bool
	// rode is set when the job offered its report to the claim loop (at
	// most once: its slot goes with the report); slotGiven when the claim
	// loop kept its slot, which the job then must not free. Both are
	// written before the report's verdict is sent, and read after it.
	rode      bool
	slotGiven bool
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

// settle stops watching the handler (its lease, TaskTimeout, the task's
// time limit): the runner is done with it, and the report's delivery
// decides. It may be called more than once.
func (j *job) settle() {
	j.reporting.Store(true)
	j.lease.end()
	if j.timeout != nil {
		j.timeout.Stop()
	}
	if j.limit != nil {
		j.limit.Stop()
	}
}

// handlerReturned reports whether the handler returned.
func (j *job) handlerReturned() bool {
	select {
	case <-j.returned:
		return true
	default:
		return false
	}
}

// leaseWatch stops a running handler whose lease the runner could not
// renew in time. The lease is renewed by every heartbeat that lists the
// task and is answered; it is counted on the runner's own clock from when
// that heartbeat was sent (no server time is compared with a local one),
// or, before the first, from when the claim's answer arrived (from when
// the claim was first sent, when it took more than one try). Once three
// quarters of the lease passed without a renewal, the handler is halted
// with ErrTaskLost: the last quarter is the margin in which it stops
// before the server may give the task to another worker.
type leaseWatch struct {
	length time.Duration
	mu     sync.Mutex
	timer  *time.Timer
	done   bool
}

// An unrenewed lease counts as lost after leaseWatchNum/leaseWatchDen of
// it.
const (
	leaseWatchNum = 3
	leaseWatchDen = 4
)

func (w *leaseWatch) limit() time.Duration { return w.length * leaseWatchNum / leaseWatchDen }

// renew counts the lease from from.
func (w *leaseWatch) renew(from time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.timer.Reset(time.Until(from.Add(w.limit())))
	}
}

// end stops watching: the handler returned, or the runner gave up on it.
func (w *leaseWatch) end() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.timer.Stop()
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
		client:     c,
		cfg:        cfg,
		handler:    handler,
		log:        cfg.Logger.With("worker_id", cfg.WorkerID),
		inflight:   map[LeaseRef]*job{},
		claims:     map[string]bool{},
		abandon:    make(chan struct{}),
		draining:   make(chan struct{}),
		hurry:      make(chan struct{}),
		retune:     make(chan struct{}, 1),
		carryReady: make(chan struct{}, 1),
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

// StopAndCancel stops the runner now, as a second Ctrl-C would: it stops
// claiming as if Run's context ended and, without waiting DrainTimeout,
// cancels every handler's context (cause ErrShutdown); handlers get
// CancelGrace to return, and the tasks whose handlers did not finish are
// released. Run then returns. It may be called at any time, more than
// once, before Run too (Run then stops as soon as it registered).
func (r *Runner) StopAndCancel() {
	r.hurryOnce.Do(func() { close(r.hurry) })
	r.mu.Lock()
	stop := r.stopRun
	r.mu.Unlock()
	if stop != nil {
		stop(ErrShutdown)
	}
}

// Run works until ctx is cancelled, then drains: it stops claiming, waits
// up to DrainTimeout for in-flight handlers, cancels the contexts of those
// still running (cause ErrShutdown), waits up to CancelGrace more, and
// releases the tasks whose handlers did not finish (back to PENDING,
// claimable at once, without spending their attempts), in one request. It
// keeps heartbeating until the drain is over. Reports still being
// delivered are waited for (each at most ReportTimeout).
//
// It returns nil after a drain; an error when the worker cannot register
// (a 4xx); and, after stopping on its own, the *Problem of a 401 or 403
// answer to any of its calls: a key revoked, expired or without the scope
// or queue it needs. Such a stop fails and releases nothing (the server
// refuses the key): the tasks the runner held go back to the queue when
// their leases run out.
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

	// Handlers and reports outlive ctx (the drain); they keep its values.
	detached := context.WithoutCancel(ctx)
	handlerCtx, cancelHandlers := context.WithCancelCause(detached)
	defer cancelHandlers(ErrShutdown)
	runCtx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	r.mu.Lock()
	r.stopRun = stopRun
	r.mu.Unlock()
	select {
	case <-r.hurry: // StopAndCancel came first
		stopRun(ErrShutdown)
	default:
	}
	beatCtx, stopBeats := context.WithCancel(detached)
	var beats sync.WaitGroup
	beats.Add(1)
	go func() {
		defer beats.Done()
		r.heartbeatLoop(beatCtx)
	}()

	r.claimLoop(runCtx, handlerCtx)
	r.drain(cancelHandlers)

	stopBeats()
	beats.Wait()
	if err := r.fatal(); err != nil {
		r.log.Error("worker stopped: the server refused its credentials", "error", err)
		return fmt.Errorf("taskmaster runner: stopped: %w", err)
	}
	r.log.Info("worker stopped")
	return nil
}

// fatal returns why the runner stopped on its own, or nil.
func (r *Runner) fatal() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatalErr
}

// stopFor stops the runner on its own because the server refused its
// credentials (err is a 401 or 403): nothing it could send would be
// accepted, so it stops claiming and cancels its handlers now, and
// neither fails nor releases their tasks.
func (r *Runner) stopFor(err error) {
	r.fatalOnce.Do(func() {
		r.mu.Lock()
		r.fatalErr = err
		r.mu.Unlock()
		r.log.Error("the server refused this worker's credentials: stopping the worker, without failing or releasing its tasks "+
			"(the server takes them back when their leases run out)", "error", err)
		r.StopAndCancel()
	})
}

// isAuthProblem reports whether err is a 401 or a 403: the server refuses
// the key, whatever the request.
func isAuthProblem(err error) bool {
	p, ok := AsProblem(err)
	return ok && (p.Status == http.StatusUnauthorized || p.Status == http.StatusForbidden)
}

// isResultProblem reports whether err is the server refusing what a report
// carries (422 invalid, 413 too large): sending it again cannot help.
func isResultProblem(err error) bool {
	p, ok := AsProblem(err)
	return ok && (p.Status == http.StatusUnprocessableEntity || p.Status == http.StatusRequestEntityTooLarge)
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
		if p, ok := AsProblem(err); ok && p.Status < 500 && p.Status != http.StatusTooManyRequests {
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

// beatInterval is the heartbeat interval in force: heartbeatInterval,
// shortened to a third of the shortest lease the runner held so far, so
// that a lease is renewed twice before the lease watch would give it up.
func (r *Runner) beatInterval() time.Duration {
	d := r.heartbeatInterval()
	if third := time.Duration(r.leaseBeat.Load()); third > 0 && third < d {
		return max(third, minBeatInterval)
	}
	return d
}

// minBeatInterval is the shortest heartbeat interval a short lease makes
// the runner use.
const minBeatInterval = 100 * time.Millisecond

// heldLease notes that the runner holds a lease of length d: the heartbeats
// must come often enough to renew it (see beatInterval).
func (r *Runner) heldLease(d time.Duration) {
	third := int64(d / 3)
	for {
		cur := r.leaseBeat.Load()
		if cur != 0 && cur <= third {
			return
		}
		if r.leaseBeat.CompareAndSwap(cur, third) {
			break
		}
	}
	select {
	case r.retune <- struct{}{}:
	default:
	}
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
	interval := r.beatInterval()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.retune:
			if next := r.beatInterval(); next != interval {
				r.log.Info("heartbeating every third of the shortest lease held, to renew it in time", "interval", next)
				interval = next
				t.Reset(interval)
			}
			continue
		case <-t.C:
		}
		sent := time.Now()
		listed, claims := r.held()
		bctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		res, err := r.beat(bctx, listed, claims)
		cancel()
		switch {
		case err == nil:
			r.act(res, listed, sent)
		case IsWorkerDead(err) || IsWorkerNotFound(err):
			r.reregister(ctx, err)
		case ctx.Err() != nil:
			return
		case isAuthProblem(err):
			r.stopFor(err)
		default:
			r.log.Warn("heartbeat failed", "error", err)
		}
		if next := r.beatInterval(); next != interval {
			interval = next
			t.Reset(interval)
		}
	}
}

// beat sends one heartbeat listing the tasks listed and the claims in
// flight, or a plain one to a server that takes no task lists (it answers
// the list as an unknown field).
func (r *Runner) beat(ctx context.Context, listed []LeaseRef, claims []string) (*HeartbeatResult, error) {
	if r.plainBeats.Load() {
		return r.client.Heartbeat(ctx, r.cfg.WorkerID)
	}
	res, err := r.client.HeartbeatWith(ctx, r.cfg.WorkerID, HeartbeatParams{Tasks: listed, ClaimsInFlight: claims})
	if len(claims) > 0 && namesField(err, "claims_in_flight") {
		// A server older than claims_in_flight: list the tasks alone.
		res, err = r.client.HeartbeatTasks(ctx, r.cfg.WorkerID, listed)
	}
	// Only a server that does not know the task list: any other 400 (a
	// proxy's, say) must not end the renewal of every lease for good.
	if namesField(err, "tasks") {
		r.plainBeats.Store(true)
		r.log.Warn("the server takes no task lists in heartbeats (it has no leases); sending plain heartbeats", "error", err)
		r.mu.Lock()
		for _, j := range r.inflight {
			j.lease.end() // nothing renews a lease now
		}
		r.mu.Unlock()
		return r.client.Heartbeat(ctx, r.cfg.WorkerID)
	}
	return res, err
}

// held lists the tasks in flight that the runner still holds (not those it
// lost), under their leases, and the claims whose answers it awaits: taken
// together, so that a claim answered meanwhile is named one way or the
// other (its tasks are in flight before it leaves the claims).
func (r *Runner) held() ([]LeaseRef, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]LeaseRef, 0, len(r.inflight))
	for ref, j := range r.inflight {
		if !errors.Is(j.halted(), ErrTaskLost) {
			out = append(out, ref)
		}
	}
	var claims []string
	for id := range r.claims {
		claims = append(claims, id)
	}
	return out, claims
}

// claiming notes a claim sent (on) or answered or given up (off).
func (r *Runner) claiming(requestID string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.claims[requestID] = true
	} else {
		delete(r.claims, requestID)
	}
}

// act carries out the answer to a heartbeat sent at sent listing listed:
// the leases of the listed tasks still held were renewed; it halts the
// lost and cancelled tasks' handlers and stops claiming on drain.
func (r *Runner) act(res *HeartbeatResult, listed []LeaseRef, sent time.Time) {
	// A task both lost and to cancel is one whose attempt the server
	// ended at its time limit: the claim's answer came late enough that
	// the server's clock got there before the Runner's.
	timedOut := make(map[LeaseRef]bool, len(res.Cancel))
	for _, ref := range res.Cancel {
		timedOut[ref] = true
	}
	lost := make(map[LeaseRef]bool, len(res.Lost))
	for _, ref := range res.Lost {
		lost[ref] = true
		j := r.job(ref)
		switch {
		case j == nil:
		case j.reporting.Load():
			// Its outcome is being reported (on a claim, or on its own):
			// the task no longer held is that report saved, or the lease
			// gone, which the report's answer tells. There is no handler
			// to stop; the heartbeats stop listing it.
			if j.halt(ErrTaskLost) {
				r.log.Debug("task no longer held while its report is under way: the report's answer decides", "task_id", ref.ID)
			}
		case timedOut[ref]:
			if j.halt(ErrTaskTimeLimit) {
				r.log.Warn("the task's time limit is up (the server ended its attempt); cancelling its handler and dropping its outcome", "task_id", ref.ID)
			}
		case j.halt(ErrTaskLost):
			r.log.Warn("task lost: the server no longer gives this worker the task; cancelling its handler and dropping its outcome", "task_id", ref.ID)
		}
	}
	if !r.plainBeats.Load() {
		for _, ref := range listed {
			if j := r.job(ref); j != nil && !lost[ref] && j.lease != nil {
				j.lease.renew(sent)
			}
		}
	}
	for _, ref := range res.Cancel {
		// A task whose outcome is being reported has no handler to stop.
		if j := r.job(ref); j != nil && !j.reporting.Load() && j.halt(ErrTaskCancelled) {
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
	err := r.register(ctx, false)
	switch {
	case err == nil || ctx.Err() != nil:
	case isAuthProblem(err):
		r.stopFor(err)
	default:
		r.log.Error("register again failed", "error", err)
	}
}

// claimLoop claims while ctx lives: it waits for a free slot, asks for as
// many tasks as there are free slots, and starts a goroutine per task. An
// empty queue is waited out on the server (a long-poll claim), not here.
//
// Between claims (waiting for a free slot, or about to claim at once) it
// takes the reports of the handlers that finish (see ride), each with its
// slot: its next claim carries them, so that a worker that takes one task
// at a time spends one request per task. While a claim is under way, while
// it waits out an idle interval, and once it stops, it takes none: a report
// never waits for a claim.
func (r *Runner) claimLoop(ctx, handlerCtx context.Context) {
	defer r.closeCarry()
	idle := time.Duration(0)
	wait := r.claimWait()
	for ctx.Err() == nil {
		// One free slot, or one report with its slot, at least; then as
		// many more as are free. None once draining (until ctx ends, when
		// Run drains as on any shutdown).
		r.openCarry()
		free := 0
		select {
		case <-ctx.Done():
			return
		case <-r.draining:
			r.closeCarry()
			<-ctx.Done()
			return
		case r.slots <- struct{}{}:
			free = 1
		case <-r.carryReady:
		}
		carried := r.takeCarried(maxClaimLimit - free)
		n := free + len(carried)
		if n == 0 {
			continue // woken for reports an earlier claim took
		}
	more:
		for n < min(cap(r.slots), maxClaimLimit) {
			select {
			case r.slots <- struct{}{}:
				n++
				free++
			default:
				break more
			}
		}
		if ctx.Err() != nil || r.Draining() { // the select above may pick a slot over either
			for range free {
				<-r.slots
			}
			bounce(carried)
			continue
		}
		// The claim is not cancelled by ctx, waiting or not: a claim cut
		// off after the server committed it would leave its tasks held by
		// no one until this worker is declared dead. So shutdown lets a
		// waiting claim run out (ClaimWait is at most DrainTimeout), and
		// claimed tasks are handled (within the drain) even when ctx ended
		// meanwhile. The timeout only guards against a server that never
		// answers.
		begin, tries := time.Now(), 0
		requestID := newRequestID()
		r.claiming(requestID, true)
		cctx, cancel := context.WithTimeout(withTries(context.WithoutCancel(ctx), &tries), wait+r.cfg.ReportTimeout)
		complete, fail := reportsOf(carried)
		res, err := r.client.ClaimReporting(cctx, ClaimParams{WorkerID: r.cfg.WorkerID, Limit: n, Wait: wait, LeaseSeconds: r.cfg.LeaseSeconds,
			RequestID: requestID}, complete, fail)
		cancel()
		tasks := res.Tasks
		if len(tasks) == 0 {
			r.claiming(requestID, false) // answered with none, or given up
		}
		// The leases started when the server committed the claim, just
		// before it answered (a long poll waits before it claims). An
		// answer to a repeat, though, carries the tasks of an earlier try
		// whose answer was lost: their leases may have started as early as
		// the first try was sent.
		leasesFrom := time.Now()
		if tries > 1 {
			leasesFrom = begin
		}
		gave := r.answerCarried(carried, res, err, n-len(tasks))
		for range n - gave - len(tasks) {
			<-r.slots
		}
		switch {
		case err != nil && (IsWorkerDead(err) || IsWorkerNotFound(err)):
			r.reregister(ctx, err)
			continue
		case err != nil && isAuthProblem(err):
			r.stopFor(err)
			continue
		case err != nil && len(carried) > 0 && r.reportsRefused(err):
			// What was refused is the reports, which now go their own
			// way: the claim may be sent again at once.
			continue
		case err != nil:
			r.log.Warn("claim failed", "error", err, "reports", len(carried))
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
		// Back to waiting for a slot: a handler of these tasks that returns
		// at once finds the loop taking reports.
		r.openCarry()
		for _, t := range tasks {
			r.start(handlerCtx, t, leasesFrom)
		}
		r.claiming(requestID, false)
	}
}

// carried is a handler's outcome that the claim loop took to report on its
// next claim (see ride): a completion or a failure.
type carried struct {
	job      *job
	complete *CompleteItem
	fail     *FailItem
	// verdict receives nil when the claim delivered the report, or the
	// server answered that the task is no longer this worker's; else why
	// the report must go on its own.
	verdict chan error
}

func (c *carried) what() string {
	if c.complete != nil {
		return "complete"
	}
	return "fail"
}

// errNotCarried is the verdict on a report the claim loop gave back
// unsent: it stopped claiming.
var errNotCarried = errors.New("taskmaster runner: the claim loop stopped before carrying the report")

// ride offers c, the report of j's task, to the claim loop when the loop is
// between claims (waiting for a free slot, or about to claim at once): its
// next claim carries the report, which j's slot goes with (the handler
// returned), and the task stays in flight, listed by the heartbeats, until
// the claim's answer. It reports whether that claim delivered the report
// (or the server answered that the task is no longer this worker's). It
// returns false at once when the loop is claiming, waiting out an idle
// interval, stopping or draining; and after the claim, when it failed (the
// client's retries spent, a problem answer) or did not deliver the report:
// the caller then delivers it on its own, with every retry a report gets.
// j nil, or a job that rode already, does not ride.
func (r *Runner) ride(j *job, c *carried) bool {
	if j == nil || j.rode {
		return false
	}
	<-j.returned // at once: the handler's goroutine only has to close it
	r.mu.Lock()
	if !r.carryOpen {
		r.mu.Unlock()
		return false
	}
	j.rode = true
	c.job, c.verdict = j, make(chan error, 1)
	r.carryQueue = append(r.carryQueue, c)
	r.mu.Unlock()
	select {
	case r.carryReady <- struct{}{}:
	default: // the loop is already woken
	}
	err := <-c.verdict
	if err != nil && !errors.Is(err, errNotCarried) {
		r.log.Info("the claim carrying the report did not deliver it; sending it on its own", "task_id", j.task.ID, "report", c.what(), "error", err)
	}
	return err == nil
}

// openCarry lets handlers' reports ride the next claim (see ride), unless
// the server takes none on claims.
func (r *Runner) openCarry() {
	if r.noCarry.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.carryOpen = true
}

// takeCarried stops reports from riding the next claim and takes those
// offered, each with its slot, at most limit (and MaxBatch) of them: the
// others are given back unsent.
func (r *Runner) takeCarried(limit int) []*carried {
	r.mu.Lock()
	r.carryOpen = false
	q := r.carryQueue
	r.carryQueue = nil
	r.mu.Unlock()
	if limit = max(min(limit, MaxBatch), 0); len(q) > limit {
		bounce(q[limit:])
		q = q[:limit]
	}
	return q
}

// closeCarry stops reports from riding claims, and gives back unsent those
// offered: the claim loop stops, or drains.
func (r *Runner) closeCarry() { bounce(r.takeCarried(0)) }

// bounce gives reports back unsent, with their slots.
func bounce(list []*carried) {
	for _, c := range list {
		c.verdict <- errNotCarried
	}
}

// reportsOf is what a claim carrying list sends: its completions and its
// failures, each in list's order.
func reportsOf(list []*carried) (complete []CompleteItem, fail []FailItem) {
	for _, c := range list {
		if c.complete != nil {
			complete = append(complete, *c.complete)
		} else {
			fail = append(fail, *c.fail)
		}
	}
	return complete, fail
}

// answerCarried gives each report that a claim carried its verdict, from
// the claim's answer res or its error err. A report delivered or dropped
// (the task is no longer this worker's) takes its task out of flight at
// once, and leaves its slot to the claim loop; one the claim did not
// deliver goes its own way, and takes its slot back while spare (the slots
// the claim's tasks left unused) lasts. It returns how many slots it gave
// back.
func (r *Runner) answerCarried(list []*carried, res ClaimResult, err error, spare int) (gave int) {
	completed, failed := res.Completed, res.Failed
	for _, c := range list {
		verdict := err
		if err == nil {
			var o ItemOutcome
			if c.complete != nil {
				o, completed = completed[0], completed[1:]
			} else {
				o, failed = failed[0], failed[1:]
			}
			verdict = r.judge(c, o)
		}
		switch {
		case verdict == nil:
			r.mu.Lock()
			delete(r.inflight, c.job.task.Ref())
			r.mu.Unlock()
			c.job.slotGiven = true
		case gave < spare:
			gave++
		default:
			// The claim's tasks took every slot: the task goes on without
			// one until its report is delivered (its handler returned, so
			// Concurrency still bounds the handlers).
			c.job.slotGiven = true
		}
		c.verdict <- verdict
	}
	return gave
}

// judge is the verdict on c from its outcome o in a claim's answer: nil
// when o says it was delivered, or that the task is no longer this
// worker's (logged as deliver does); else o's problem.
func (r *Runner) judge(c *carried, o ItemOutcome) error {
	id, what, err := c.job.task.ID, c.what(), o.Err()
	switch {
	case o.Outcome != OutcomeError:
		return nil
	case saved(what, err):
		r.log.Info(savedMsg, "task_id", id, "report", what, "status", statusOf(err), "via", "claim")
		return nil
	case heldElsewhere(err):
		r.log.Warn("task no longer held by this worker; dropping it", "task_id", id, "report", what, "via", "claim", "error", err)
		return nil
	}
	return err
}

// reportsRefused reports whether err, the error of a claim that carried
// reports, is the server refusing them rather than the claim: what they
// hold (422, 413), or reports on a claim at all (a server older than them
// answers the field as unknown, 400: claims carry no more reports then).
func (r *Runner) reportsRefused(err error) bool {
	if isResultProblem(err) {
		return true
	}
	if namesField(err, "complete", "fail") {
		if r.noCarry.CompareAndSwap(false, true) {
			r.log.Warn("the server takes no reports on claims; reporting each outcome on its own", "error", err)
		}
		return true
	}
	return false
}

// namesField reports whether err is a malformed request (400) naming one
// of fields: what a server older than them answers a request that sends
// them (an unknown field).
func namesField(err error, fields ...string) bool {
	p, ok := AsProblem(err)
	if !ok || p.Type != ProblemMalformedRequest {
		return false
	}
	for _, f := range p.Errors {
		if slices.Contains(fields, f.Field) {
			return true
		}
	}
	return false
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

// start runs t, whose lease is counted from leasesFrom, on a goroutine
// holding one slot. The task is in flight (and listed by heartbeats) until
// its outcome is reported or dropped; the slot is held until the handler
// returned as well (or the runner abandons it at shutdown), so that never
// more than Concurrency handlers run.
func (r *Runner) start(handlerCtx context.Context, t Task, leasesFrom time.Time) {
	received := time.Now()
	if r.cfg.HandlerContext != nil {
		handlerCtx = r.cfg.HandlerContext(handlerCtx, t)
	}
	taskCtx, cancel := context.WithCancelCause(handlerCtx)
	t.progress = &progressReporter{client: r.client, workerID: r.cfg.WorkerID, reportTimeout: r.cfg.ReportTimeout}
	j := &job{task: t, cancel: cancel, stop: make(chan struct{}), returned: make(chan struct{})}
	if length := leaseLength(t); length > 0 && !r.plainBeats.Load() {
		r.heldLease(length)
		j.lease = &leaseWatch{length: length}
		j.lease.timer = time.AfterFunc(j.lease.limit()-time.Since(leasesFrom), func() {
			if !j.handlerReturned() && j.halt(ErrTaskLost) {
				r.log.Warn("lease not renewed in time: the server may give the task to another worker; cancelling its handler and dropping its outcome",
					"task_id", t.ID, "lease", length)
			}
		})
	}
	ref := t.Ref()
	r.mu.Lock()
	r.inflight[ref] = j
	r.mu.Unlock()
	if r.cfg.TaskTimeout > 0 {
		j.timeout = time.AfterFunc(r.cfg.TaskTimeout, func() {
			if j.halt(ErrTaskTimeout) {
				r.log.Warn("handler ran past TaskTimeout; cancelling it", "task_id", t.ID, "timeout", r.cfg.TaskTimeout)
			}
		})
	}
	if d, ok := t.timeLimit(); ok {
		// The server's clock ended the attempt at TimeoutAt; the claim's
		// answer came after ClaimedAt, so counting the limit from its
		// arrival stops the handler no earlier than the server does.
		j.limit = time.AfterFunc(max(time.Until(received.Add(d)), 0), func() {
			if j.halt(ErrTaskTimeLimit) {
				r.log.Warn("the task's time limit is up; cancelling its handler and dropping its outcome", "task_id", t.ID, "limit", d)
			}
		})
	}
	r.wg.Add(1)
	go func() {
		keep := false
		defer func() {
			j.settle()
			cancel(nil)
			if !keep {
				r.mu.Lock()
				delete(r.inflight, ref)
				r.mu.Unlock()
			}
			if !j.slotGiven { // else a claim took the slot over with the report
				select {
				case <-j.returned:
				case <-r.abandon:
				}
				<-r.slots
			}
			r.wg.Done()
		}()
		keep = r.work(taskCtx, j)
	}()
}

// leaseLength is the length of the lease t was claimed under (renewals
// keep it), from the claim's answer; 0 when it does not say.
func leaseLength(t Task) time.Duration {
	if t.LeaseExpiresAt == nil || t.ClaimedAt == nil {
		return 0
	}
	return max(t.LeaseExpiresAt.Sub(*t.ClaimedAt), 0)
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
// handler's behalf (a lost one is dropped; at shutdown it is released) and
// the handler's eventual outcome is dropped. It reports whether the task
// stays in flight for the drain to release it.
func (r *Runner) work(ctx context.Context, j *job) (keep bool) {
	t := j.task
	done := make(chan outcome, 1)
	go func() {
		defer close(j.returned)
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
	// From here on the runner is done with the handler: neither a lease it
	// cannot renew nor a timer stops anything, and the report's delivery
	// decides.
	j.settle()
	cause := j.halted()
	switch {
	case errors.Is(cause, ErrTaskLost), errors.Is(cause, ErrTaskTimeLimit):
		r.log.Warn("dropping the outcome of a lost task", "task_id", t.ID, "handler_returned", returned, "cause", cause)
		return false
	case cause != nil && !returned:
		r.log.Warn("handler did not return after its context was cancelled; failing its task", "task_id", t.ID, "cause", cause)
		r.fail(t, cause.Error()+": the handler did not return", false, nil)
		return false
	case cause != nil && o.err != nil:
		r.fail(t, cause.Error()+": "+o.err.Error(), false, j)
		return false
	case !returned:
		r.log.Warn("handler did not return after its context was cancelled; releasing its task", "task_id", t.ID)
		return r.releaseLater(j)
	}
	return r.report(ctx, j, o)
}

// report reports a handler's outcome; it returns true for a task left for
// the drain to release.
func (r *Runner) report(ctx context.Context, j *job, o outcome) bool {
	t := j.task
	if cause := j.halted(); errors.Is(cause, ErrTaskLost) || errors.Is(cause, ErrTaskTimeLimit) {
		r.log.Warn("dropping the outcome of a lost task", "task_id", t.ID, "handler_returned", true, "cause", cause)
		return false
	}
	if o.err == nil {
		r.complete(t, o.result, j)
		return false
	}
	if d, ok := SnoozeDelay(o.err); ok {
		r.snooze(t, d)
		return false
	}
	if errors.Is(context.Cause(ctx), ErrShutdown) {
		// Cancelled by shutdown: whatever the handler says, the task did not
		// fail on its merits. It goes back without spending its attempt.
		r.log.Info("handler stopped by shutdown; releasing its task", "task_id", t.ID, "error", o.err)
		return r.releaseLater(j)
	}
	r.fail(t, o.err.Error(), IsNonRetryable(o.err), j)
	return false
}

// complete reports a handler's result: on the runner's next claim when j
// (the job whose handler returned it, nil for none) may ride one (see
// ride), else, or when that claim does not deliver it, on its own. A result
// the server refuses (422, 413) fails the task as non-retryable: it would
// be refused again.
func (r *Runner) complete(t Task, value any, j *job) {
	var enqueue []SubmitParams
	switch n := value.(type) {
	case Next:
		value, enqueue = n.Result, n.Enqueue
	case *Next:
		if n != nil {
			value, enqueue = n.Result, n.Enqueue
		}
	}
	result, err := marshalValue(value)
	if err != nil {
		r.fail(t, "handler result cannot be encoded as JSON: "+err.Error(), true, j)
		return
	}
	if _, err := (CompleteItem{Enqueue: enqueue}).request(); err != nil {
		r.fail(t, "the handler's enqueue cannot be sent: "+err.Error(), true, j)
		return
	}
	// A claim's completions enqueue nothing: a Next's enqueue goes on its
	// own.
	if len(enqueue) == 0 && r.ride(j, &carried{complete: &CompleteItem{ID: t.ID, LeaseID: t.LeaseID, Result: result}}) {
		return
	}
	err = r.deliver(t, "complete", func(ctx context.Context) error {
		_, err := r.client.Complete(ctx, t.ID, CompleteParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Result: result, Enqueue: enqueue})
		return err
	})
	if err != nil {
		r.fail(t, "the server rejected the handler's result: "+err.Error(), true, nil)
	}
}

// snooze puts t back for d, without spending its attempt. A snooze the
// server refuses as invalid (a delay out of range) fails the task,
// retryable, so that it is not lost.
func (r *Runner) snooze(t Task, d time.Duration) {
	err := r.deliver(t, "snooze", func(ctx context.Context) error {
		_, err := r.client.Snooze(ctx, t.ID, SnoozeParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Delay: d})
		return err
	})
	if err != nil {
		r.fail(t, "the server refused the handler's snooze: "+err.Error(), false, nil)
	}
}

// fail reports t failed with msg: on the runner's next claim when j may
// ride one, as for complete, else on its own.
func (r *Runner) fail(t Task, msg string, nonRetryable bool, j *job) {
	if r.ride(j, &carried{fail: &FailItem{ID: t.ID, LeaseID: t.LeaseID, Error: msg, NonRetryable: nonRetryable}}) {
		return
	}
	err := r.deliver(t, "fail", func(ctx context.Context) error {
		_, err := r.client.Fail(ctx, t.ID, FailParams{WorkerID: r.cfg.WorkerID, LeaseID: t.LeaseID, Error: msg, NonRetryable: nonRetryable})
		return err
	})
	if err != nil {
		r.log.Error("the server refused a failure report", "task_id", t.ID, "error", err)
	}
}

func (r *Runner) reportContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.ReportTimeout)
	return withPersistentRetry(ctx), cancel
}

// deliver sends a report of t with send until the server accepts it, says
// the task is no longer this worker's, or ReportTimeout runs out:
// transport errors, 5xx, 408 and 429 are retried (429 after its
// Retry-After). The task stays in flight meanwhile, so the heartbeats keep
// listing it and renewing its lease. It returns the server's refusal of
// what the report carries (422, 413), for the caller to act on; every other
// end is dealt with here: a task held elsewhere is dropped, a 401 or 403
// stops the runner, and a report given up is logged (the server takes the
// task back).
func (r *Runner) deliver(t Task, what string, send func(context.Context) error) error {
	ctx, cancel := r.reportContext()
	defer cancel()
	err := send(ctx)
	switch {
	case err == nil:
		return nil
	case saved(what, err):
		r.log.Info(savedMsg, "task_id", t.ID, "report", what, "status", statusOf(err))
	case heldElsewhere(err):
		r.log.Warn("task no longer held by this worker; dropping it", "task_id", t.ID, "report", what, "error", err)
	case isAuthProblem(err):
		r.stopFor(err)
	case isResultProblem(err):
		return err
	default:
		r.log.Error("report failed, giving up on it; the server will take the task back", "task_id", t.ID, "report", what,
			"report_timeout", r.cfg.ReportTimeout, "error", err)
	}
	return nil
}

// savedMsg logs a report refused because the task already has the status
// the report makes (see saved).
const savedMsg = "report taken as delivered: the task already has the status it makes (a try whose answer was lost saved it)"

// statusOf is the task's status a report's problem gives ("" for none).
func statusOf(err error) Status {
	if p, ok := AsProblem(err); ok {
		return p.CurrentStatus
	}
	return ""
}

// saved reports whether err refuses a report of what (complete, fail)
// because the task already ended the way that report ends it (DONE for a
// completion, DEAD for a failure): a try whose answer was lost, a claim's
// or the report's own, saved it. (A failure that put the task back to
// PENDING is answered lease-lost when repeated: heldElsewhere drops it.)
func saved(what string, err error) bool {
	p, ok := AsProblem(err)
	if !ok || !IsInvalidTransition(err) {
		return false
	}
	switch what {
	case "complete":
		return p.CurrentStatus == StatusDone
	case "fail":
		return p.CurrentStatus == StatusDead
	}
	return false
}

// heldElsewhere reports whether a report's error says the worker no longer
// holds the task: another worker or lease has it, it is no longer RUNNING,
// or it is gone.
func heldElsewhere(err error) bool {
	return IsLeaseLost(err) || IsInvalidTransition(err) || isType(err, ProblemTaskNotFound)
}

// releaseLater leaves j in flight, listed by the heartbeats, for the drain
// to release with the others in one request. It returns true.
func (r *Runner) releaseLater(j *job) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releases = append(r.releases, j)
	return true
}

// releaseHeld hands the tasks the drain left back (see ReleaseBatch), in
// as few requests as the batch limit allows, then forgets them.
func (r *Runner) releaseHeld() {
	r.mu.Lock()
	jobs := r.releases
	r.releases = nil
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	defer func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, j := range jobs {
			delete(r.inflight, j.task.Ref())
		}
	}()
	if r.fatal() != nil {
		r.log.Warn("not releasing the tasks the drain left: the server refuses this worker's credentials", "tasks", len(jobs))
		return
	}
	for len(jobs) > 0 {
		n := min(len(jobs), MaxBatch)
		r.release(jobs[:n])
		jobs = jobs[n:]
	}
}

// release hands jobs back in one request, delivered like a report.
func (r *Runner) release(jobs []*job) {
	refs := make([]LeaseRef, len(jobs))
	for i, j := range jobs {
		refs[i] = j.task.Ref()
	}
	ctx, cancel := r.reportContext()
	defer cancel()
	out, err := r.client.ReleaseBatch(ctx, r.cfg.WorkerID, refs)
	switch {
	case err == nil:
		for i, o := range out {
			switch {
			case o.Outcome != OutcomeError:
				r.log.Info("task released", "task_id", refs[i].ID, "outcome", o.Outcome)
			case heldElsewhere(o.Err()):
				r.log.Warn("task no longer held by this worker; dropping it", "task_id", refs[i].ID, "report", "release", "error", o.Err())
			default:
				r.log.Error("the server refused a release", "task_id", refs[i].ID, "error", o.Err())
			}
		}
	case isType(err, ProblemNotFound, ProblemMethodNotAllowed):
		// A server that offers no release: a retryable failure hands the
		// tasks back, at the price of an attempt each.
		r.log.Warn("the server offers no release; failing the tasks as retryable instead (each spends an attempt)", "tasks", len(jobs))
		for _, j := range jobs {
			r.fail(j.task, "worker shut down before the handler finished", false, nil)
		}
	case isAuthProblem(err):
		r.stopFor(err)
	default:
		r.log.Error("release failed, giving up on it; the server will take the tasks back", "tasks", len(jobs),
			"report_timeout", r.cfg.ReportTimeout, "error", err)
	}
}

// drain waits for in-flight tasks: up to DrainTimeout (unless
// StopAndCancel hurries it), then cancels their contexts, up to CancelGrace
// more, then abandons the rest; last, it releases the tasks whose handlers
// did not finish.
func (r *Runner) drain(cancelHandlers context.CancelCauseFunc) {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	if n := len(r.InFlight()); n > 0 {
		r.log.Info("draining", "in_flight", n, "timeout", r.cfg.DrainTimeout)
	}
	timer := time.NewTimer(r.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		r.log.Warn("drain timeout; cancelling handlers", "in_flight", len(r.InFlight()))
	case <-r.hurry:
		r.log.Warn("stopping now; cancelling handlers", "in_flight", len(r.InFlight()))
	}
	cancelHandlers(ErrShutdown)
	if !waitOr(done, r.cfg.CancelGrace) {
		close(r.abandon)
		<-done
	}
	r.releaseHeld()
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
