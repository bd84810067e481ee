// Package application holds the use cases: it implements the driving ports
// with the driven ones. Every use case that changes state runs inside one
// TxRunner transaction, so the change and its events commit together. No
// SQL, HTTP or wiring framework appears here.
package application

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Limits on requests the use cases accept.
const (
	// MaxClaimLimit is the most tasks one claim returns.
	MaxClaimLimit = 1000
	// MaxListLimit is the largest page of a listing.
	MaxListLimit = 1000
	// DefaultListLimit is the page size when none is asked.
	DefaultListLimit = 100
	// MaxBatch is the most items one batch request carries.
	MaxBatch = 1000
	// MaxClaimWait is the longest a claim may wait for work.
	MaxClaimWait = 30 * time.Second
	// DefaultClaimPollInterval is how often a waiting claim looks again
	// when notifications cannot tell it that a task became claimable: one
	// of its queues is rate-limited or capped (a token refills, a slot
	// frees), or there is no notifier.
	DefaultClaimPollInterval = 500 * time.Millisecond
	// DefaultClaimSafetyInterval is how often a waiting claim on queues
	// without limits looks again with no notification: the guard against
	// a wake-up that went astray (tasks locked by a transaction that then
	// rolled back, delayed tasks submitted before this instance started).
	DefaultClaimSafetyInterval = 10 * time.Second
	// MaxAwait is the longest a producer may wait for a task to finish.
	MaxAwait = 60 * time.Second
	// DefaultAwaitSafetyInterval is how often a producer waiting for a
	// task looks again without a notification: the guard against an
	// announcement that went astray.
	DefaultAwaitSafetyInterval = 10 * time.Second
)

// Config holds the policies the use cases apply.
type Config struct {
	// Backoff is the retry delay policy.
	Backoff backoff.Policy
	// Liveness holds the worker silence thresholds.
	Liveness worker.LivenessConfig
	// ClaimPollInterval is how often a waiting claim on a limited queue (or
	// without a notifier) looks again (0: DefaultClaimPollInterval).
	ClaimPollInterval time.Duration
	// ClaimSafetyInterval is how often any other waiting claim looks again
	// without a notification (0: DefaultClaimSafetyInterval). Waiting
	// claims of an instance look together, at the same multiples of it, so
	// they share transactions.
	ClaimSafetyInterval time.Duration
	// DefaultLeaseSeconds is the lease of a claim that asks for none (0:
	// task.DefaultLeaseSeconds).
	DefaultLeaseSeconds int
	// MaxResponseBytes caps the estimated size of the tasks one claim or
	// listing answers with (0: DefaultMaxResponseBytes); at least one task
	// is always handed out.
	MaxResponseBytes int64
	// BatchRequests is the most requests (claims; completions and
	// failures) one shared transaction serves (0: DefaultBatchRequests; 1:
	// every request in a transaction of its own).
	BatchRequests int
	// ConcurrentBatches is how many shared transactions of one kind may run
	// at once (0: DefaultConcurrentBatches); more than one only while
	// BatchOverlapAt requests wait for the ones running.
	ConcurrentBatches int
	// BatchOverlapAt is how many requests must wait for the running shared
	// transactions of their kind before another starts beside them (0: a
	// full batch, BatchRequests; 1: at once).
	BatchOverlapAt int
	// AwaitSafetyInterval is how often a producer waiting for a task
	// looks again without a notification (0: DefaultAwaitSafetyInterval).
	// The waiters of an instance look together, at the same multiples of
	// it, with one statement for all of them.
	AwaitSafetyInterval time.Duration
}

// Defaults of the request batching.
const (
	// DefaultBatchRequests is Config.BatchRequests unless configured.
	DefaultBatchRequests = 64
	// DefaultConcurrentBatches is Config.ConcurrentBatches unless
	// configured.
	DefaultConcurrentBatches = 2
	// MaxBatchRequests bounds Config.BatchRequests.
	MaxBatchRequests = 1000
)

func (c Config) batchRequests() int {
	if c.BatchRequests <= 0 {
		return DefaultBatchRequests
	}
	return c.BatchRequests
}

func (c Config) batchOverlapAt() int {
	if c.BatchOverlapAt <= 0 {
		return c.batchRequests()
	}
	return c.BatchOverlapAt
}

func (c Config) concurrentBatches() int {
	if c.ConcurrentBatches <= 0 {
		return DefaultConcurrentBatches
	}
	return c.ConcurrentBatches
}

// Bounds of Config.MaxResponseBytes.
const (
	// DefaultMaxResponseBytes is the response byte cap unless configured.
	DefaultMaxResponseBytes = 8 << 20
	// MinMaxResponseBytes is the smallest cap accepted.
	MinMaxResponseBytes = 64 << 10
)

// Validate reports whether the config can be used.
func (c Config) Validate() error {
	var lease error
	if c.DefaultLeaseSeconds != 0 {
		lease = task.ValidateLeaseSeconds("default lease", c.DefaultLeaseSeconds)
	}
	var responses error
	if c.MaxResponseBytes != 0 && c.MaxResponseBytes < MinMaxResponseBytes {
		responses = fmt.Errorf("max response bytes must be at least %d", MinMaxResponseBytes)
	}
	return errors.Join(c.Backoff.Validate(), c.Liveness.Validate(), lease, responses)
}

// maxResponseBytes is the response byte cap in force.
func (c Config) maxResponseBytes() int64 {
	if c.MaxResponseBytes == 0 {
		return DefaultMaxResponseBytes
	}
	return c.MaxResponseBytes
}

// leaseSeconds is the default lease in force.
func (c Config) leaseSeconds() int {
	if c.DefaultLeaseSeconds == 0 {
		return task.DefaultLeaseSeconds
	}
	return c.DefaultLeaseSeconds
}

// TaskService implements ports.TaskService.
type TaskService struct {
	tx       ports.TxRunner
	cfg      Config
	notifier ports.TaskNotifier
	// claims and reports serve concurrent claims, and concurrent reports
	// of holders, in shared transactions.
	claims  *combiner[claim, claimAnswer]
	reports *combiner[report, []ports.TaskResult]
	// finished serves the safety checks of waiting producers: one
	// statement reads the statuses of every task checked at once.
	finished *combiner[uuid.UUID, bool]
	// progress announces coalesced progress reports (nil: never).
	progress *ProgressFlusher
	// batches is told of every shared transaction (nil: none is observed).
	batches ports.BatchObserver
	// rand jitters retry delays (math/rand/v2's, safe for concurrent use).
	rand backoff.Source
}

var _ ports.TaskService = (*TaskService)(nil)

// TaskServiceOption configures a TaskService.
type TaskServiceOption func(*TaskService)

// WithNotifier lets claims wait for work (long poll) on n's wake-ups;
// without it a waiting claim only polls.
func WithNotifier(n ports.TaskNotifier) TaskServiceOption {
	return func(s *TaskService) { s.notifier = n }
}

// WithProgressFlusher lets f announce the progress reports that came
// within a second of their task's previous announcement; without it they
// are stored and announced only by later reports.
func WithProgressFlusher(f *ProgressFlusher) TaskServiceOption {
	return func(s *TaskService) { s.progress = f }
}

// WithBatchObserver tells o of every shared transaction the service runs
// for concurrent requests, by kind: "claim" (claims, with the reports they
// carry), "report" (completions, failures and releases), "await" (reads of
// whether awaited tasks finished).
func WithBatchObserver(o ports.BatchObserver) TaskServiceOption {
	return func(s *TaskService) { s.batches = o }
}

// NewTaskService returns the task use cases over tx.
func NewTaskService(tx ports.TxRunner, cfg Config, opts ...TaskServiceOption) *TaskService {
	s := &TaskService{tx: tx, cfg: cfg, rand: rand.Float64}
	for _, o := range opts {
		o(s)
	}
	if s.cfg.ClaimPollInterval <= 0 {
		s.cfg.ClaimPollInterval = DefaultClaimPollInterval
	}
	if s.cfg.ClaimSafetyInterval <= 0 {
		s.cfg.ClaimSafetyInterval = DefaultClaimSafetyInterval
	}
	if s.cfg.AwaitSafetyInterval <= 0 {
		s.cfg.AwaitSafetyInterval = DefaultAwaitSafetyInterval
	}
	s.finished = &combiner[uuid.UUID, bool]{run: s.finishedBatch, size: MaxBatch, running: 1,
		observe: s.batches, kind: "await"}
	s.claims = &combiner[claim, claimAnswer]{run: s.claimBatch, fits: claimFits, size: s.cfg.batchRequests(), running: s.cfg.concurrentBatches(), overlapAt: s.cfg.batchOverlapAt(),
		observe: s.batches, kind: "claim"}
	s.reports = &combiner[report, []ports.TaskResult]{run: s.reportsBatch, fits: func(batch []*pending[report, []ports.TaskResult], p *pending[report, []ports.TaskResult]) bool {
		return !reportsOverlap(batch, p)
	}, size: s.cfg.batchRequests(), running: s.cfg.concurrentBatches(), overlapAt: s.cfg.batchOverlapAt(),
		observe: s.batches, kind: "report"}
	return s
}

// WorkerService implements ports.WorkerService.
type WorkerService struct {
	tx  ports.TxRunner
	cfg Config
	// progress announces the coalesced progress reports of heartbeats
	// (nil: never).
	progress *ProgressFlusher
}

var _ ports.WorkerService = (*WorkerService)(nil)

// WorkerServiceOption configures a WorkerService.
type WorkerServiceOption func(*WorkerService)

// WithHeartbeatProgress lets f announce the coalesced progress reports
// that heartbeats carry (see WithProgressFlusher).
func WithHeartbeatProgress(f *ProgressFlusher) WorkerServiceOption {
	return func(s *WorkerService) { s.progress = f }
}

// NewWorkerService returns the worker use cases over tx.
func NewWorkerService(tx ports.TxRunner, cfg Config, opts ...WorkerServiceOption) *WorkerService {
	s := &WorkerService{tx: tx, cfg: cfg}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Liveness returns the thresholds in force.
func (s *WorkerService) Liveness() worker.LivenessConfig { return s.cfg.Liveness }

// MaxHeartbeatTasks returns the heartbeat list cap (MaxHeartbeatTasks).
func (s *WorkerService) MaxHeartbeatTasks() int { return MaxHeartbeatTasks }

// QueueService implements ports.QueueService.
type QueueService struct {
	stats ports.StatsReader
	tx    ports.TxRunner
	push  PushConfig
}

var _ ports.QueueService = (*QueueService)(nil)

// QueueServiceOption configures a QueueService.
type QueueServiceOption func(*QueueService)

// WithPushDelivery lets queues be push queues under c (without it, a
// change that turns push delivery on is refused).
func WithPushDelivery(c PushConfig) QueueServiceOption {
	return func(s *QueueService) { s.push = c }
}

// NewQueueService returns the queue use cases: statistics read through
// stats, settings changed through tx.
func NewQueueService(stats ports.StatsReader, tx ports.TxRunner, opts ...QueueServiceOption) *QueueService {
	s := &QueueService{stats: stats, tx: tx}
	for _, o := range opts {
		o(s)
	}
	return s
}
