package app

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	pushadapter "github.com/taskmaster/taskmaster/adapters/push"
	"github.com/taskmaster/taskmaster/adapters/sealer"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/ports"
)

// PushConfig configures push delivery (issue 27; docs/operations.md "Push
// delivery").
type PushConfig struct {
	// AllowedHosts is TASKMASTER_PUSH_ALLOWED_HOSTS, parsed (empty: push
	// delivery is off).
	AllowedHosts push.AllowList
	// SecretKeys seal the push secrets at rest (none: stored unsealed).
	SecretKeys [][]byte
	// MaxResponseBytes is how much of an endpoint's answer is read.
	MaxResponseBytes int64
	// LeaseMargin is what a delivery's lease adds to its queue's timeout.
	LeaseMargin time.Duration
	// DrainTimeout is how long a stopping instance lets its deliveries
	// finish before it hands them back.
	DrainTimeout time.Duration
	// Refresh is how often each instance reads the push queues.
	Refresh time.Duration
}

// DefaultPushConfig returns push delivery's defaults: off.
func DefaultPushConfig() PushConfig {
	return PushConfig{
		MaxResponseBytes: pushadapter.DefaultMaxResponseBytes,
		LeaseMargin:      application.DefaultPushLeaseMargin,
		DrainTimeout:     application.DefaultPushDrainTimeout,
		Refresh:          application.DefaultPushRefresh,
	}
}

// pushSettings are the configuration variables of push delivery.
func pushSettings() []setting {
	return []setting{
		{"TASKMASTER_PUSH_ALLOWED_HOSTS", "push-allowed-hosts", "hosts push queues may deliver to: exact names or addresses, and *.suffix patterns, comma-separated (empty: push delivery off)",
			func(c *Config, v string) error {
				a, err := push.ParseAllowList(v)
				c.Push.AllowedHosts = a
				return err
			},
			func(c *Config) string { return c.Push.AllowedHosts.String() }},
		{"TASKMASTER_PUSH_SECRET_KEYS", "push-secret-keys", "base64 AES-256 keys sealing push secrets and headers at rest, comma-separated, the sealing one first (empty: stored unsealed)",
			func(c *Config, v string) error {
				keys, err := sealer.ParseKeys(v)
				c.Push.SecretKeys = keys
				return err
			},
			func(c *Config) string {
				if len(c.Push.SecretKeys) == 0 {
					return ""
				}
				return fmt.Sprintf("(%d keys)", len(c.Push.SecretKeys))
			}},
		{"TASKMASTER_PUSH_MAX_RESPONSE_BYTES", "push-max-response-bytes", "how much of an endpoint's answer is read: a completed task's result, a failure's excerpt",
			intSetter(func(c *Config, n int) { c.Push.MaxResponseBytes = int64(n) }),
			func(c *Config) string { return strconv.FormatInt(c.Push.MaxResponseBytes, 10) }},
		{"TASKMASTER_PUSH_LEASE_MARGIN_SECONDS", "push-lease-margin-seconds", "what a delivery's lease adds to its queue's timeout_seconds (a crashed instance's deliveries are delivered again after the lease)",
			secondsSetter(func(c *Config, d time.Duration) { c.Push.LeaseMargin = d }),
			func(c *Config) string { return seconds(c.Push.LeaseMargin) }},
		{"TASKMASTER_PUSH_DRAIN_SECONDS", "push-drain-seconds", "how long a stopping instance lets its deliveries finish before it hands them back",
			secondsSetter(func(c *Config, d time.Duration) { c.Push.DrainTimeout = d }),
			func(c *Config) string { return seconds(c.Push.DrainTimeout) }},
		{"TASKMASTER_PUSH_REFRESH_MS", "push-refresh-ms", "how often each instance reads the push queues (a new push queue is served within this)",
			millisSetter(func(c *Config, d time.Duration) { c.Push.Refresh = d }),
			func(c *Config) string { return millis(c.Push.Refresh) }},
	}
}

// validatePush checks the push settings.
func (c Config) validatePush(add func(string, error)) {
	if c.Push.MaxResponseBytes < 1<<10 || c.Push.MaxResponseBytes > 16<<20 {
		add("TASKMASTER_PUSH_MAX_RESPONSE_BYTES", errors.New("must be between 1024 and 16777216"))
	}
	if c.Push.LeaseMargin < time.Second || c.Push.LeaseMargin > time.Hour {
		add("TASKMASTER_PUSH_LEASE_MARGIN_SECONDS", errors.New("must be between 1 and 3600"))
	}
	if c.Push.DrainTimeout <= 0 || c.Push.DrainTimeout > 50*time.Second {
		add("TASKMASTER_PUSH_DRAIN_SECONDS", errors.New("must be positive and at most 50 (the stop timeout is 60)"))
	}
	if c.Push.Refresh <= 0 {
		add("TASKMASTER_PUSH_REFRESH_MS", errors.New("must be positive"))
	}
}

// InstanceID names this instance: its leadership leases' owner, its push
// dispatcher's worker.
type InstanceID string

// Dispatcher is the instance's push dispatcher (nil Service when push
// delivery is off).
type Dispatcher struct {
	Service *application.Dispatcher
}

// pushModule provides named limits, the sealer, the HTTP sender and the
// push dispatcher, run with the app when TASKMASTER_PUSH_ALLOWED_HOSTS is
// set. Tests give the sender names of their own with fx.Decorate on
// pushadapter.ResolveFunc.
func pushModule() fx.Option {
	return fx.Options(
		fx.Provide(
			newSealer,
			func() pushadapter.ResolveFunc { return nil },
			newPushSender,
			newQueueService,
			fx.Annotate(application.NewLimitService, fx.As(new(ports.LimitService))),
			newDispatcher,
		),
		fx.Invoke(func(Dispatcher) {}),
	)
}

func newSealer(cfg Config, logger *zap.Logger) (*sealer.Sealer, error) {
	s, err := sealer.New(cfg.Push.SecretKeys)
	if err != nil {
		return nil, err
	}
	if !cfg.Push.AllowedHosts.Empty() && !s.Sealing() {
		logger.Warn("TASKMASTER_PUSH_SECRET_KEYS is not set: push secrets and static headers are stored unsealed in the database")
	}
	return s, nil
}

func newPushSender(cfg Config, resolve pushadapter.ResolveFunc) ports.Sender {
	return pushadapter.NewSender(pushadapter.SenderConfig{Allow: cfg.Push.AllowedHosts, MaxResponseBytes: cfg.Push.MaxResponseBytes,
		Resolve: resolve})
}

func newQueueService(stats ports.StatsReader, tx ports.TxRunner, cfg Config, s *sealer.Sealer) ports.QueueService {
	return application.NewQueueService(stats, tx, application.WithPushDelivery(application.PushConfig{
		Allow: cfg.Push.AllowedHosts, Sealer: s}))
}

// workerIDChars are the characters a worker id may not hold.
var workerIDChars = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)

// dispatcherWorkerID is the push dispatcher's worker id of instance id.
func dispatcherWorkerID(id InstanceID) string {
	w := "push:" + workerIDChars.ReplaceAllString(string(id), ":")
	if len(w) > 128 {
		w = w[len(w)-128:]
	}
	return w
}

type dispatcherParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    Config
	Tasks     *application.TaskService
	Workers   *application.WorkerService
	Tx        ports.TxRunner
	Sender    ports.Sender
	Sealer    *sealer.Sealer
	Instance  InstanceID
	Metrics   *metrics.Registry
	Logger    *zap.Logger
	// Server makes the dispatcher start after, and stop before, the API
	// server (whose stop ends every waiting claim).
	Server *httpadapter.Server
}

func newDispatcher(p dispatcherParams) Dispatcher {
	if p.Config.Push.AllowedHosts.Empty() {
		return Dispatcher{}
	}
	d := application.NewDispatcher(p.Tasks, p.Workers, p.Tx, p.Sender, p.Sealer, application.DispatcherConfig{
		WorkerID: dispatcherWorkerID(p.Instance), Instance: string(p.Instance), Allow: p.Config.Push.AllowedHosts,
		Refresh: p.Config.Push.Refresh, LeaseMargin: p.Config.Push.LeaseMargin, DrainTimeout: p.Config.Push.DrainTimeout,
		Observe: p.Metrics.ObserveDelivery,
	}, p.Logger.Named("push"))
	p.Lifecycle.Append(fx.Hook{OnStart: d.Start, OnStop: d.Stop})
	return Dispatcher{Service: d}
}
