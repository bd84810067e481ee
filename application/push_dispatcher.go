package application

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Defaults of the push dispatcher.
const (
	// DefaultPushRefresh is how often a dispatcher reads the push queues.
	DefaultPushRefresh = time.Second
	// DefaultPushLeaseMargin is what a delivery's lease adds to its queue's
	// timeout: time to report the answer.
	DefaultPushLeaseMargin = 10 * time.Second
	// DefaultPushDrainTimeout is how long a stopping dispatcher lets its
	// deliveries in flight finish before it hands them back.
	DefaultPushDrainTimeout = 10 * time.Second
	// DefaultPushClaimWait is how long a dispatcher's claim waits for work.
	DefaultPushClaimWait = 5 * time.Second
	// MaxPushInFlightPerInstance bounds one instance's deliveries in flight
	// across its push queues: its heartbeat lists them all.
	MaxPushInFlightPerInstance = MaxHeartbeatTasks
	// pushStatsKept is how many deliveries per queue an instance reports
	// (ports.DeliveryStats).
	pushStatsKept = 50
	// pushStatsEvery and pushStatsFresh: statistics are written every
	// second while they change, and at least every pushStatsFresh while an
	// instance has any (readers take a minute's reports).
	pushStatsEvery = time.Second
	pushStatsFresh = 20 * time.Second
	// pushStatsPruneAfter: rows of instances silent this long are deleted.
	pushStatsPruneAfter = time.Hour
	// pushErrorExcerpt is how much of a failing answer's body the task's
	// error keeps.
	pushErrorExcerpt = 1024
	// pushMinClaimGap spaces a queue's claims that came back empty at
	// once (a closed notifier on shutdown, a queue that turned paused).
	pushMinClaimGap = 100 * time.Millisecond
)

// DispatcherConfig configures an instance's push dispatcher.
type DispatcherConfig struct {
	// WorkerID is the worker the dispatcher claims and reports as: one per
	// instance, registered by the dispatcher.
	WorkerID string
	// Instance names the instance in the delivery statistics.
	Instance string
	// Allow is TASKMASTER_PUSH_ALLOWED_HOSTS: a queue whose URL it does not
	// allow (any more) is not served.
	Allow push.AllowList
	// Refresh is how often the push queues are read (0:
	// DefaultPushRefresh).
	Refresh time.Duration
	// LeaseMargin is added to a queue's timeout for its deliveries' lease
	// (0: DefaultPushLeaseMargin).
	LeaseMargin time.Duration
	// DrainTimeout is how long Stop lets deliveries in flight finish
	// before it cancels them and hands their tasks back (0:
	// DefaultPushDrainTimeout).
	DrainTimeout time.Duration
	// ClaimWait is how long a claim waits for work (0:
	// DefaultPushClaimWait).
	ClaimWait time.Duration
	// Observe, when not nil, is told of every delivery (metrics).
	Observe func(queue string, status int, latency time.Duration)
}

func (c *DispatcherConfig) defaults() {
	if c.Refresh <= 0 {
		c.Refresh = DefaultPushRefresh
	}
	if c.LeaseMargin <= 0 {
		c.LeaseMargin = DefaultPushLeaseMargin
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultPushDrainTimeout
	}
	if c.ClaimWait <= 0 {
		c.ClaimWait = DefaultPushClaimWait
	}
}

// Dispatcher delivers the tasks of push queues (queue.Push) to their
// endpoints. Every instance runs one, and none leads: each claims like a
// worker, through the claim use case, as a worker of its own
// (DispatcherConfig.WorkerID), so liveness, leases and the reapers treat
// it like any worker. For each push queue it runs a loop that claims as
// many tasks as it has free slots (max_in_flight, and
// MaxPushInFlightPerInstance across its queues), POSTs each one
// (ports.Sender) and reports the answer through the fenced report use
// case (ReportDelivery). Its heartbeats list the deliveries in flight,
// renewing their leases; an operator's cancel cancels a delivery.
//
// max_in_flight holds across every instance: each RUNNING task of a push
// queue is a delivery in flight, and the claim caps them as max_running
// caps a queue's (queue.State.Allowance), under the queue's lock; a slow
// endpoint never holds more connections than that.
//
// Stop stops claiming, lets the deliveries in flight finish for
// DrainTimeout, then cancels the others and hands their tasks back
// (released: claimable at once, the attempt given back), so another
// instance delivers them: an endpoint may thus see a task again (delivery
// is at least once; Taskmaster-Task-Id names it).
type Dispatcher struct {
	lifecycle.Base
	tasks   *TaskService
	workers *WorkerService
	tx      ports.TxRunner
	sender  ports.Sender
	sealer  ports.Sealer
	cfg     DispatcherConfig
	logger  *zap.Logger

	total *slots

	// loops counts the claim loops running, those of queues no longer
	// served included (they end at once): a stop waits for every one
	// before it waits for the deliveries they start.
	loops sync.WaitGroup

	mu         sync.Mutex
	runners    map[string]*pushRunner
	inflight   map[uuid.UUID]*pushDelivery
	registered []string // the queues the worker row lists; nil: not registered
	drained    bool
	openErrs   map[string]string // the last error opening each queue's secrets, logged once
	statsAt    time.Time         // when the statistics were last written
	prunedAt   time.Time
}

var _ lifecycle.Service = (*Dispatcher)(nil)

// NewDispatcher returns a stopped dispatcher.
func NewDispatcher(tasks *TaskService, workers *WorkerService, tx ports.TxRunner, sender ports.Sender, sealer ports.Sealer,
	cfg DispatcherConfig, logger *zap.Logger) *Dispatcher {
	cfg.defaults()
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Dispatcher{tasks: tasks, workers: workers, tx: tx, sender: sender, sealer: sealer, cfg: cfg,
		logger: logger.With(zap.String("worker_id", cfg.WorkerID)), total: newSlots(MaxPushInFlightPerInstance)}
}

// pushRunner is one push queue's claim loop.
type pushRunner struct {
	name   string
	cfg    atomic.Pointer[runnerConfig]
	slots  *slots
	cancel context.CancelFunc
	// changed is closed and replaced when cfg changes.
	changedMu sync.Mutex
	changed   chan struct{}
	stats     deliveryRing
	// inFlightReported is the in-flight count last written (d.mu).
	inFlightReported int
}

// runnerConfig is a push queue's delivery as the dispatcher serves it.
type runnerConfig struct {
	q       ports.PushQueue
	secrets []string
	headers map[string]string
	// serve is false while the queue is paused, its URL is not allowed, or
	// its secrets cannot be opened.
	serve bool
}

// pushDelivery is one delivery in flight.
type pushDelivery struct {
	ref    task.LeaseRef
	queue  string
	ctx    context.Context
	cancel context.CancelFunc
	// lost: the heartbeat said the dispatcher no longer holds the task;
	// cancelled: an operator asked to cancel it.
	lost, cancelled atomic.Bool
}

// Start starts the dispatcher; it registers its worker and serves the push
// queues until Stop.
func (d *Dispatcher) Start(ctx context.Context) error {
	return d.StartLoop(ctx, "push dispatcher", func(context.Context) (lifecycle.LoopFunc, error) {
		if d.cfg.WorkerID == "" {
			return nil, errors.New("no worker id")
		}
		d.mu.Lock()
		d.runners, d.inflight, d.registered, d.drained = map[string]*pushRunner{}, map[uuid.UUID]*pushDelivery{}, nil, false
		d.openErrs = map[string]string{}
		d.mu.Unlock()
		return d.run, nil
	})
}

// Stop stops claiming, drains the deliveries in flight (DrainTimeout), hands
// the rest back, and returns once it is done (or ctx ends).
func (d *Dispatcher) Stop(ctx context.Context) error { return d.StopLoop(ctx) }

func (d *Dispatcher) run(ctx context.Context) {
	deliverCtx, stopDeliveries := context.WithCancel(context.Background())
	defer stopDeliveries()
	var deliveries sync.WaitGroup
	beatCtx, stopBeats := context.WithCancel(context.Background())
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		d.heartbeats(beatCtx)
	}()

	refresh := time.NewTicker(d.cfg.Refresh)
	defer refresh.Stop()
	for {
		d.refresh(ctx, deliverCtx, &deliveries)
		d.writeStats(ctx)
		select {
		case <-ctx.Done():
		case <-refresh.C:
			continue
		}
		break
	}

	// Stopping: no more claims (ctx, which every loop's context derives
	// from, is done); the deliveries in flight have DrainTimeout to
	// finish, then they are cancelled and handed back.
	d.loops.Wait()
	if !waitTimeout(&deliveries, d.cfg.DrainTimeout) {
		d.logger.Info("push dispatcher: handing back deliveries in flight", zap.Int("deliveries", d.inFlight()))
		stopDeliveries()
		deliveries.Wait()
	}
	stopBeats()
	<-beats
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.tx.Run(wctx, func(ctx context.Context, st ports.Stores) error {
		return st.Push.SaveDeliveryStats(ctx, d.cfg.Instance, nil)
	}); err != nil {
		d.logger.Warn("push dispatcher: delete delivery statistics", zap.Error(err))
	}
}

// waitTimeout waits for wg, at most d; false when it timed out.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (d *Dispatcher) inFlight() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.inflight)
}

// refresh reads the push queues, starts a claim loop for each new one,
// updates the others' settings, stops the loops of queues that are no
// longer push queues (their deliveries in flight finish), and keeps the
// worker's registration in step.
func (d *Dispatcher) refresh(ctx, deliverCtx context.Context, deliveries *sync.WaitGroup) {
	var qs []ports.PushQueue
	err := d.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		qs, err = st.Push.Queues(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("push dispatcher: read push queues", zap.Error(err))
		}
		return
	}
	names := make([]string, 0, len(qs))
	d.mu.Lock()
	seen := make(map[string]bool, len(qs))
	for _, q := range qs {
		seen[q.Queue] = true
		names = append(names, q.Queue)
		cfg := d.runnerConfig(q)
		r := d.runners[q.Queue]
		if r == nil {
			rctx, cancel := context.WithCancel(ctx)
			r = &pushRunner{name: q.Queue, slots: newSlots(q.Push.MaxInFlight), cancel: cancel, changed: make(chan struct{})}
			r.cfg.Store(cfg)
			d.runners[q.Queue] = r
			d.loops.Add(1)
			go func() {
				defer d.loops.Done()
				d.claimLoop(rctx, r, deliverCtx, deliveries)
			}()
			continue
		}
		r.slots.setCap(q.Push.MaxInFlight)
		r.cfg.Store(cfg)
		r.signal()
	}
	var gone []*pushRunner
	for name, r := range d.runners {
		if !seen[name] {
			gone = append(gone, r)
			delete(d.runners, name)
		}
	}
	registered, drained := d.registered, d.drained
	prune := time.Since(d.prunedAt) >= time.Minute
	if prune {
		d.prunedAt = time.Now()
	}
	d.mu.Unlock()
	for _, r := range gone {
		r.cancel() // deliveries in flight go on; the loop ends at once
	}
	if len(names) > worker.MaxQueues {
		names = names[:worker.MaxQueues]
	}
	if len(names) > 0 && !drained && (registered == nil || !slices.Equal(registered, names)) && d.register(ctx, names) && registered == nil {
		// The loops waiting for the registration may claim now.
		d.mu.Lock()
		for _, r := range d.runners {
			r.signal()
		}
		d.mu.Unlock()
	}
	if prune {
		if err := d.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			return st.Push.PruneDeliveryStats(ctx, pushStatsPruneAfter)
		}); err != nil && ctx.Err() == nil {
			d.logger.Warn("push dispatcher: prune delivery statistics", zap.Error(err))
		}
	}
}

// runnerConfig opens q's secrets and decides whether to serve it (d.mu
// held). An error opening them is logged once (until it changes).
func (d *Dispatcher) runnerConfig(q ports.PushQueue) *runnerConfig {
	cfg := &runnerConfig{q: q, serve: !q.Paused}
	u, err := url.Parse(q.Push.URL)
	if err != nil || !d.cfg.Allow.Allows(u.Hostname()) {
		cfg.serve = false
		d.logOnce(q.Queue, "push dispatcher: queue not served: its URL's host is not allowed by TASKMASTER_PUSH_ALLOWED_HOSTS")
		return cfg
	}
	cfg.secrets, cfg.headers, err = OpenPushSecrets(d.sealer, q)
	if err != nil {
		cfg.serve = false
		d.logOnce(q.Queue, "push dispatcher: queue not served: "+err.Error())
		return cfg
	}
	delete(d.openErrs, q.Queue)
	return cfg
}

func (d *Dispatcher) logOnce(queue, msg string) {
	if d.openErrs[queue] == msg {
		return
	}
	d.openErrs[queue] = msg
	d.logger.Error(msg, zap.String("queue", queue))
}

// register registers (again) the dispatcher's worker, listing queues, and
// reports whether it did.
func (d *Dispatcher) register(ctx context.Context, queues []string) bool {
	_, _, err := d.workers.Register(ctx, worker.RegisterParams{ID: d.cfg.WorkerID, Queues: queues})
	if err != nil {
		if ctx.Err() == nil {
			d.logger.Warn("push dispatcher: register worker", zap.Error(err))
		}
		return false
	}
	d.mu.Lock()
	d.registered = append([]string{}, queues...)
	d.mu.Unlock()
	return true
}

// ready reports whether the worker is registered and not drained.
func (d *Dispatcher) ready() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.registered != nil && !d.drained
}

// signal tells the queue's loop its settings changed.
func (r *pushRunner) signal() {
	r.changedMu.Lock()
	close(r.changed)
	r.changed = make(chan struct{})
	r.changedMu.Unlock()
}

func (r *pushRunner) changes() <-chan struct{} {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	return r.changed
}

// claimLoop claims r's tasks while it has free slots, and delivers each.
func (d *Dispatcher) claimLoop(ctx context.Context, r *pushRunner, deliverCtx context.Context, deliveries *sync.WaitGroup) {
	failures := 0
	for ctx.Err() == nil {
		cfg := r.cfg.Load()
		changed := r.changes()
		if !cfg.serve || !d.ready() {
			select {
			case <-ctx.Done():
			case <-changed:
			case <-time.After(d.cfg.Refresh):
			}
			continue
		}
		if r.slots.acquire(ctx) != nil {
			return
		}
		n := 1 + r.slots.tryAcquire(MaxClaimLimit-1)
		got := d.total.tryAcquire(n)
		if got < n {
			r.slots.release(n - got)
			n = got
		}
		if n == 0 {
			// The instance holds its most deliveries: wait for one to end.
			if d.total.acquire(ctx) != nil {
				return
			}
			d.total.release(1)
			continue
		}
		lease := cfg.q.Push.TimeoutSeconds + int(d.cfg.LeaseMargin/time.Second)
		wait := d.cfg.ClaimWait.Milliseconds()
		started := time.Now()
		res, err := d.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: d.cfg.WorkerID, Queue: r.name, Limit: &n,
			LeaseSeconds: &lease, WaitMillis: &wait, Push: true})
		unused := n - len(res.Tasks)
		r.slots.release(unused)
		d.total.release(unused)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if errors.Is(err, worker.ErrDead) || errors.Is(err, worker.ErrNotFound) {
				d.mu.Lock()
				d.registered = nil // the next refresh registers again
				d.mu.Unlock()
			}
			if failures == 1 || failures%30 == 0 {
				d.logger.Warn("push dispatcher: claim", zap.String("queue", r.name), zap.Error(err), zap.Int("failures", failures))
			}
			sleep(ctx, min(time.Duration(failures)*100*time.Millisecond, 2*time.Second))
			continue
		}
		failures = 0
		for _, t := range res.Tasks {
			dl := d.track(deliverCtx, t)
			deliveries.Add(1)
			go func() {
				defer deliveries.Done()
				defer r.slots.release(1)
				defer d.total.release(1)
				d.deliver(dl, r, cfg, t)
			}()
		}
		if len(res.Tasks) == 0 && time.Since(started) < pushMinClaimGap {
			sleep(ctx, pushMinClaimGap)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// track records a delivery in flight (listed by the heartbeats).
func (d *Dispatcher) track(deliverCtx context.Context, t *task.Task) *pushDelivery {
	v := t.Snapshot()
	ctx, cancel := context.WithCancel(deliverCtx)
	dl := &pushDelivery{ref: task.LeaseRef{ID: v.ID, LeaseID: v.LeaseID}, queue: v.Queue, ctx: ctx, cancel: cancel}
	d.mu.Lock()
	d.inflight[v.ID] = dl
	d.mu.Unlock()
	return dl
}

// deliver POSTs t to the queue's endpoint and reports the answer.
func (d *Dispatcher) deliver(dl *pushDelivery, r *pushRunner, cfg *runnerConfig, t *task.Task) {
	defer func() {
		dl.cancel()
		d.mu.Lock()
		delete(d.inflight, dl.ref.ID)
		d.mu.Unlock()
	}()
	v := t.Snapshot()
	body := []byte(v.Payload)
	if len(body) == 0 {
		body = []byte("null")
	}
	header := make(map[string]string, len(cfg.headers)+6)
	for k, val := range cfg.headers {
		header[k] = val
	}
	if v.Trace.Parent != "" {
		// The task's trace continues at the endpoint (W3C trace context).
		header[push.HeaderTraceparent] = v.Trace.Parent
		if v.Trace.State != "" {
			header[push.HeaderTracestate] = v.Trace.State
		}
	}
	header[push.HeaderTaskID] = v.ID.String()
	header[push.HeaderAttempt] = strconv.Itoa(v.Attempts)
	header[push.HeaderQueue] = v.Queue
	header[push.HeaderSignature] = push.Signature(time.Now().Unix(), body, cfg.secrets...)
	timeout := time.Duration(cfg.q.Push.TimeoutSeconds) * time.Second
	if v.TimeoutAt != nil && v.ClaimedAt != nil {
		// The attempt's time limit (the task's, or its queue's default)
		// bounds its delivery too: both times are the database's, their
		// difference is the limit.
		timeout = min(timeout, max(v.TimeoutAt.Sub(*v.ClaimedAt), time.Second))
	}
	resp := d.sender.Send(dl.ctx, ports.Delivery{URL: cfg.q.Push.URL, Timeout: timeout, Body: body, Header: header})
	if resp.Err == nil || resp.TimedOut || dl.ctx.Err() == nil {
		r.stats.add(resp.Status, resp.Latency)
		if d.cfg.Observe != nil {
			d.cfg.Observe(v.Queue, resp.Status, resp.Latency)
		}
	}
	rep := ports.DeliveryReport{TaskID: v.ID, WorkerID: d.cfg.WorkerID, LeaseID: v.LeaseID, HTTPStatus: resp.Status}
	switch {
	case dl.lost.Load():
		return // taken back: a report would be refused
	case resp.Err != nil && dl.cancelled.Load():
		rep.Error = "cancelled by an operator during delivery" // the task ends DEAD cancelled
	case resp.Err != nil && !resp.TimedOut && dl.ctx.Err() != nil:
		d.handBack(v)
		return
	case resp.Err != nil:
		rep.Retryable = true
		rep.Error = resp.Err.Error()
		if resp.TimedOut {
			rep.Error = fmt.Sprintf("no response within %s (push.timeout_seconds, or the attempt's time limit)", timeout)
		}
	default:
		verdict := push.Judge(resp.Status, cfg.q.Push.NonRetryableStatuses, resp.RetryAfter, time.Now())
		if verdict.Complete {
			rep.Complete, rep.Result = true, resultOf(resp.Body, resp.Truncated)
			break
		}
		rep.Retryable, rep.RetryAfter = verdict.Retryable, verdict.RetryAfter
		rep.Error = failureText(resp)
	}
	d.report(v, rep)
}

// report reports a delivery, trying again while the database is
// unavailable, until the task's lease would have run out.
func (d *Dispatcher) report(v task.Snapshot, rep ports.DeliveryReport) {
	until := time.Now().Add(time.Duration(v.LeaseSeconds) * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	for {
		_, err := d.tasks.ReportDelivery(ctx, rep)
		switch {
		case err == nil:
			return
		case errors.Is(err, ports.ErrUnavailable) && ctx.Err() == nil:
			sleep(ctx, time.Second)
			continue
		default:
			// A lease lost (taken back, cancelled) is the reapers' to
			// settle: the task is delivered again.
			d.logger.Warn("push dispatcher: report delivery", zap.String("task_id", v.ID.String()),
				zap.String("queue", v.Queue), zap.Error(err))
			return
		}
	}
}

// handBack gives back the task of a delivery that a stopping dispatcher
// cancelled (task.Task.Release): PENDING again at once, the attempt given
// back, for another instance to deliver.
func (d *Dispatcher) handBack(v task.Snapshot) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease := v.LeaseID
	if _, err := d.tasks.Release(ctx, ports.ReleaseCommand{TaskID: v.ID, WorkerID: d.cfg.WorkerID, LeaseID: &lease}); err != nil {
		d.logger.Warn("push dispatcher: hand back", zap.String("task_id", v.ID.String()), zap.Error(err))
	}
}

// resultOf is a completed delivery's result: the answer's body when it is
// JSON (whole, and storable), else the body as a JSON string (cut at the
// cap, invalid UTF-8 and NULs replaced); none for an empty body.
func resultOf(body []byte, truncated bool) json.RawMessage {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if !truncated && json.Valid(body) && !bytes.Contains(body, []byte(`\u0000`)) {
		return json.RawMessage(body)
	}
	s, _ := json.Marshal(printableText(body))
	return s
}

// printableText is b as valid UTF-8 text without NULs.
func printableText(b []byte) string {
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "\uFFFD")
}

// failureText is the task's error for an answer that is no success:
// "HTTP <status>: <body excerpt>".
func failureText(resp ports.DeliveryResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", resp.Status)
	if resp.Status >= 300 && resp.Status < 400 {
		b.WriteString(" (redirects are not followed")
		if resp.Location != "" {
			b.WriteString("; Location: " + printableText([]byte(resp.Location)))
		}
		b.WriteString(")")
	}
	if body := bytes.TrimSpace(resp.Body); len(body) > 0 {
		cut := len(body) > pushErrorExcerpt
		if cut {
			body = body[:pushErrorExcerpt]
			for len(body) > 0 && !utf8.Valid(body) {
				body = body[:len(body)-1]
			}
		}
		b.WriteString(": ")
		b.WriteString(printableText(body))
		if cut || resp.Truncated {
			b.WriteString("…")
		}
	}
	return b.String()
}

// heartbeats beats every heartbeat interval, listing the deliveries in
// flight (renewing their leases), and acts on the answer.
func (d *Dispatcher) heartbeats(ctx context.Context) {
	t := time.NewTicker(d.workers.Liveness().HeartbeatInterval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.heartbeat(ctx)
	}
}

func (d *Dispatcher) heartbeat(ctx context.Context) {
	d.mu.Lock()
	if d.registered == nil {
		d.mu.Unlock()
		return
	}
	refs := make([]task.LeaseRef, 0, len(d.inflight))
	for _, dl := range d.inflight {
		refs = append(refs, dl.ref)
	}
	d.mu.Unlock()
	res, err := d.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: d.cfg.WorkerID, ListsTasks: true, Tasks: refs})
	switch {
	case errors.Is(err, worker.ErrDead) || errors.Is(err, worker.ErrNotFound):
		d.logger.Warn("push dispatcher: worker gone, registering again", zap.Error(err))
		d.mu.Lock()
		d.registered = nil
		d.mu.Unlock()
		return
	case err != nil:
		if ctx.Err() == nil {
			d.logger.Warn("push dispatcher: heartbeat", zap.Error(err))
		}
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ref := range res.Lost {
		if dl := d.inflight[ref.ID]; dl != nil && dl.ref == ref {
			dl.lost.Store(true)
			dl.cancel()
		}
	}
	for _, ref := range res.Cancel {
		if dl := d.inflight[ref.ID]; dl != nil && dl.ref == ref {
			dl.cancelled.Store(true)
			dl.cancel()
		}
	}
	if res.Drain && !d.drained {
		d.drained = true
		d.logger.Info("push dispatcher: drained by an operator; it claims nothing until the instance restarts")
	}
}

// writeStats writes the queues' delivery statistics when they changed (or
// every pushStatsFresh while there are any).
func (d *Dispatcher) writeStats(ctx context.Context) {
	d.mu.Lock()
	if time.Since(d.statsAt) < pushStatsEvery {
		d.mu.Unlock()
		return
	}
	inFlight := map[string]int{}
	for _, dl := range d.inflight {
		inFlight[dl.queue]++
	}
	var stats []ports.DeliveryStats
	dirty := false
	for name, r := range d.runners {
		st, changed := r.stats.snapshot()
		dirty = dirty || changed || r.inFlightReported != inFlight[name]
		r.inFlightReported = inFlight[name]
		st.Queue, st.InFlight = name, inFlight[name]
		if st.InFlight > 0 || len(st.Statuses) > 0 {
			stats = append(stats, st)
		}
	}
	if !dirty && (len(stats) == 0 || time.Since(d.statsAt) < pushStatsFresh) {
		d.mu.Unlock()
		return
	}
	d.statsAt = time.Now()
	d.mu.Unlock()
	if err := d.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		return st.Push.SaveDeliveryStats(ctx, d.cfg.Instance, stats)
	}); err != nil && ctx.Err() == nil {
		d.logger.Warn("push dispatcher: write delivery statistics", zap.Error(err))
	}
}

// deliveryRing keeps a queue's last deliveries.
type deliveryRing struct {
	mu       sync.Mutex
	statuses [pushStatsKept]int
	latency  [pushStatsKept]int
	n, next  int
	changed  bool
}

func (r *deliveryRing) add(status int, latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses[r.next], r.latency[r.next] = status, int(latency.Milliseconds())
	r.next = (r.next + 1) % pushStatsKept
	r.n = min(r.n+1, pushStatsKept)
	r.changed = true
}

// snapshot returns the deliveries kept, newest first, and whether any came
// since the last snapshot.
func (r *deliveryRing) snapshot() (ports.DeliveryStats, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := ports.DeliveryStats{Statuses: make([]int, r.n), LatencyMillis: make([]int, r.n)}
	for i := range r.n {
		j := (r.next - 1 - i + pushStatsKept) % pushStatsKept
		out.Statuses[i], out.LatencyMillis[i] = r.statuses[j], r.latency[j]
	}
	changed := r.changed
	r.changed = false
	return out, changed
}

// slots is a semaphore whose size may change.
type slots struct {
	mu        sync.Mutex
	size, use int
	freed     chan struct{} // closed and replaced when a slot frees or the size grows
}

func newSlots(n int) *slots { return &slots{size: n, freed: make(chan struct{})} }

// acquire takes a slot, waiting for one until ctx ends.
func (s *slots) acquire(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.use < s.size {
			s.use++
			s.mu.Unlock()
			return nil
		}
		freed := s.freed
		s.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// tryAcquire takes up to n free slots without waiting and returns how
// many it took.
func (s *slots) tryAcquire(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := max(min(n, s.size-s.use), 0)
	s.use += k
	return k
}

// release gives n slots back.
func (s *slots) release(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.use -= n
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
}

// setCap changes the size (slots in use above it are given back as they
// end).
func (s *slots) setCap(n int) {
	s.mu.Lock()
	grew := n > s.size
	s.size = n
	if grew {
		close(s.freed)
		s.freed = make(chan struct{})
	}
	s.mu.Unlock()
}
