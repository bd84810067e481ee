package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/telemetry"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// Config is the whole service configuration.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string: a URL or key=value
	// pairs, with one host or several (postgres.ParseConnString).
	DatabaseURL string
	// ListenDatabaseURL, when set, is where the notifier LISTENs for task
	// wake-ups instead of DatabaseURL: a session of its own, which a
	// transaction-pooling PgBouncer cannot give (ListenURL).
	ListenDatabaseURL string
	// ReadDatabaseURL, when set, is a read replica of DatabaseURL's primary
	// (a hot standby): the reads that may lag (listings, queue statistics,
	// the dashboard's pages) go to it while it is at most ReadMaxLag behind.
	ReadDatabaseURL string
	// ReadMaxLag is how far behind the primary the read replica may be for
	// the reads to go to it.
	ReadMaxLag time.Duration
	// TransactionPooling says that DatabaseURL goes through a
	// transaction-pooling PgBouncer: consecutive transactions of one
	// connection may run on different server sessions, so no prepared
	// statement is kept (the statement cache is off), and the notifier
	// needs ListenDatabaseURL.
	TransactionPooling bool
	// HTTP configures the API server.
	HTTP httpadapter.ServerConfig
	// Pool sizes the database connection pool.
	Pool postgres.PoolConfig
	// App holds the use-case policies (backoff, liveness thresholds).
	App application.Config
	// ReaperInterval is the heartbeat reaper's period.
	ReaperInterval time.Duration
	// DeadlineReaperInterval is the deadline reaper's period.
	DeadlineReaperInterval time.Duration
	// LeaseReaperInterval is the lease reaper's period.
	LeaseReaperInterval time.Duration
	// TimeoutReaperInterval is the timeout reaper's period: an attempt's
	// time limit is enforced within about that much of its end.
	TimeoutReaperInterval time.Duration
	// RetentionTTL is how long finished tasks and dead workers are kept (0 keeps them forever).
	RetentionTTL time.Duration
	// RetentionInterval is the retention reaper's period.
	RetentionInterval time.Duration
	// RetentionBatchSize is how many rows one retention statement deletes.
	RetentionBatchSize int
	// SchedulerInterval is the scheduler's period: how often the leading
	// instance runs the due ticks of the recurring schedules.
	SchedulerInterval time.Duration
	// LeaderLeaseTTL is how long a background job's leadership lease lasts
	// unrenewed: a leader that stops renewing (frozen, gone) is replaced
	// within it plus one tick.
	LeaderLeaseTTL time.Duration
	// Outbox configures the outbox consumers (projectors), the outbox
	// janitor and the event streams.
	Outbox outbox.Config
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is json or console.
	LogFormat string
	// PprofAddr, when set, serves net/http/pprof there (loopback only).
	PprofAddr string
	// MetricsAddr, when set, also serves the metrics there without
	// authentication (security.go).
	MetricsAddr string
	// Keys configures API key authentication (lookup cache, last-used
	// stamps).
	Keys application.KeyConfig
	// MetricsMaxQueues is how many queues have per-queue series of their
	// own in /metrics; the others are summed under queue="_other".
	MetricsMaxQueues int
	// Telemetry is what the standard OpenTelemetry environment
	// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, ...) asks of
	// tracing: off unless it asks.
	Telemetry telemetry.Config
	// Push configures push delivery.
	Push PushConfig
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	pool := postgres.DefaultPoolConfig()
	pool.StatementCacheSize = 0 // postgres.DefaultStatementCacheSize, unless transaction pooling
	return Config{
		HTTP: httpadapter.DefaultServerConfig(),
		Pool: pool,
		App: application.Config{
			Backoff:             backoff.DefaultPolicy(),
			Liveness:            worker.DefaultLivenessConfig(),
			ClaimPollInterval:   application.DefaultClaimPollInterval,
			ClaimSafetyInterval: application.DefaultClaimSafetyInterval,
			DefaultLeaseSeconds: task.DefaultLeaseSeconds,
			MaxResponseBytes:    application.DefaultMaxResponseBytes,
			BatchRequests:       application.DefaultBatchRequests,
			ConcurrentBatches:   application.DefaultConcurrentBatches,
			AwaitSafetyInterval: application.DefaultAwaitSafetyInterval,
		},
		ReaperInterval:         15 * time.Second,
		DeadlineReaperInterval: 30 * time.Second,
		LeaseReaperInterval:    5 * time.Second,
		TimeoutReaperInterval:  application.DefaultTimeoutReaperInterval,
		RetentionTTL:           7 * 24 * time.Hour,
		RetentionInterval:      10 * time.Minute,
		RetentionBatchSize:     500,
		SchedulerInterval:      time.Second,
		LeaderLeaseTTL:         15 * time.Second,
		Outbox:                 outbox.DefaultConfig(),
		LogLevel:               "info",
		LogFormat:              "json",
		MetricsMaxQueues:       metrics.DefaultMaxQueueSeries,
		ReadMaxLag:             postgres.DefaultReadMaxLag,
		Push:                   DefaultPushConfig(),
	}
}

// Validate reports every problem in the configuration, each naming its
// environment variable.
func (c Config) Validate() error {
	var errs []error
	add := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	if c.DatabaseURL == "" {
		add("TASKMASTER_DATABASE_URL", errors.New("is required"))
	} else {
		add("TASKMASTER_DATABASE_URL", checkConnString(c.DatabaseURL))
	}
	if c.ListenDatabaseURL != "" {
		add("TASKMASTER_LISTEN_DATABASE_URL", checkConnString(c.ListenDatabaseURL))
	}
	if c.ReadDatabaseURL != "" {
		add("TASKMASTER_READ_DATABASE_URL", checkConnString(c.ReadDatabaseURL))
	}
	if c.ReadMaxLag < 100*time.Millisecond {
		add("TASKMASTER_READ_MAX_LAG_MS", errors.New("must be at least 100"))
	}
	if c.TransactionPooling {
		if c.ListenDatabaseURL == "" {
			add("TASKMASTER_LISTEN_DATABASE_URL", errors.New("is required with TASKMASTER_DB_TRANSACTION_POOLING=on: "+
				"LISTEN needs a session of its own, on PostgreSQL directly (or a session-pooling port)"))
		}
		if c.Pool.StatementCacheSize > 0 {
			add("TASKMASTER_DB_STATEMENT_CACHE_SIZE", errors.New("must be 0 with TASKMASTER_DB_TRANSACTION_POOLING=on: "+
				"a prepared statement stays on the server session that prepared it"))
		}
	}
	add("TASKMASTER_HTTP_ADDR", c.HTTP.Validate())
	requests, claims, bodyBytes := c.HTTP.ValidateAdmission()
	add("TASKMASTER_MAX_INFLIGHT_REQUESTS", requests)
	add("TASKMASTER_MAX_INFLIGHT_CLAIMS", claims)
	add("TASKMASTER_MAX_INFLIGHT_BODY_BYTES", bodyBytes)
	if c.HTTP.MaxInFlightWaits < 1 {
		add("TASKMASTER_MAX_INFLIGHT_WAITS", errors.New("must be at least 1"))
	}
	add("TASKMASTER_DB_MAX_CONNS", c.Pool.Validate())
	if c.App.BatchRequests < 1 || c.App.BatchRequests > application.MaxBatchRequests {
		add("TASKMASTER_BATCH_REQUESTS", fmt.Errorf("must be between 1 and %d", application.MaxBatchRequests))
	}
	if c.App.BatchOverlapAt < 0 || c.App.BatchOverlapAt > application.MaxBatchRequests {
		add("TASKMASTER_BATCH_OVERLAP_AT", fmt.Errorf("must be between 0 and %d", application.MaxBatchRequests))
	}
	if c.App.ConcurrentBatches < 1 || c.App.ConcurrentBatches > c.Pool.MaxOpen {
		add("TASKMASTER_BATCH_CONCURRENCY", errors.New("must be between 1 and TASKMASTER_DB_MAX_CONNS"))
	}
	add("TASKMASTER_RETRY_BASE_DELAY_SECONDS", c.App.Backoff.Validate())
	add("TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS", c.App.Liveness.Validate())
	if c.App.MaxResponseBytes < application.MinMaxResponseBytes {
		add("TASKMASTER_MAX_RESPONSE_BYTES", fmt.Errorf("must be at least %d", application.MinMaxResponseBytes))
	}
	if n := c.App.DefaultLeaseSeconds; n < task.MinLeaseSeconds || n > task.MaxLeaseSeconds {
		add("TASKMASTER_LEASE_DEFAULT_SECONDS", fmt.Errorf("must be a whole number of seconds between %d and %d", task.MinLeaseSeconds, task.MaxLeaseSeconds))
	}
	positive := map[string]time.Duration{
		"TASKMASTER_REAPER_INTERVAL_MS":          c.ReaperInterval,
		"TASKMASTER_DEADLINE_REAPER_INTERVAL_MS": c.DeadlineReaperInterval,
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS":    c.LeaseReaperInterval,
		"TASKMASTER_TIMEOUT_REAPER_INTERVAL_MS":  c.TimeoutReaperInterval,
		"TASKMASTER_AWAIT_SAFETY_INTERVAL_MS":    c.App.AwaitSafetyInterval,
		"TASKMASTER_RETENTION_INTERVAL_MS":       c.RetentionInterval,
		"TASKMASTER_SCHEDULER_INTERVAL_MS":       c.SchedulerInterval,
		"TASKMASTER_OUTBOX_POLL_INTERVAL_MS":     c.Outbox.PollInterval,
		"TASKMASTER_OUTBOX_JANITOR_INTERVAL_MS":  c.Outbox.JanitorInterval,
		"TASKMASTER_EVENTS_HEARTBEAT_SECONDS":    c.HTTP.EventsHeartbeat,
	}
	for name, d := range positive {
		if d <= 0 {
			add(name, errors.New("must be positive"))
		}
	}
	for name, d := range map[string]time.Duration{
		"TASKMASTER_DB_STATEMENT_TIMEOUT_MS":           c.Pool.Conn.StatementTimeout,
		"TASKMASTER_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": c.Pool.Conn.IdleInTransactionTimeout,
		"TASKMASTER_DB_TCP_USER_TIMEOUT_MS":            c.Pool.Conn.TCPUserTimeout,
	} {
		if d != 0 && d < minConnTimeout {
			add(name, fmt.Errorf("must be 0 (off) or at least %d", minConnTimeout.Milliseconds()))
		}
	}
	if c.LeaderLeaseTTL < minLeaderLeaseTTL {
		add("TASKMASTER_LEADER_LEASE_SECONDS", fmt.Errorf("must be at least %s", seconds(minLeaderLeaseTTL)))
	}
	if c.RetentionTTL < 0 {
		add("TASKMASTER_RETENTION_TTL", errors.New("must not be negative"))
	}
	if c.Outbox.Retention < 0 {
		add("TASKMASTER_OUTBOX_RETENTION", errors.New("must not be negative"))
	}
	if c.Outbox.MaxStreams < 1 {
		add("TASKMASTER_EVENTS_MAX_STREAMS", errors.New("must be at least 1"))
	}
	if len(errs) == 0 { // the outbox's own checks repeat some above; report a mistake once
		add("TASKMASTER_OUTBOX_*", c.Outbox.Validate())
	}
	c.validateSecurity(add)
	c.validatePush(add)
	if c.MetricsMaxQueues < 1 {
		add("TASKMASTER_METRICS_MAX_QUEUES", errors.New("must be at least 1"))
	}
	if c.RetentionBatchSize < 1 || c.RetentionBatchSize > 100000 {
		add("TASKMASTER_RETENTION_BATCH_SIZE", errors.New("must be between 1 and 100000"))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		add("TASKMASTER_LOG_LEVEL", errors.New("must be debug, info, warn or error"))
	}
	switch c.LogFormat {
	case "json", "console":
	default:
		add("TASKMASTER_LOG_FORMAT", errors.New("must be json or console"))
	}
	return errors.Join(errs...)
}

// PoolConfig is the main pool's configuration: Pool, without prepared
// statements behind a transaction pooler.
func (c Config) PoolConfig() postgres.PoolConfig {
	p := c.Pool
	if c.TransactionPooling {
		p.StatementCacheSize = -1
	}
	return p
}

// ListenURL is the connection string of the notifier's listening session:
// ListenDatabaseURL, or DatabaseURL when it is not set.
func (c Config) ListenURL() string {
	if c.ListenDatabaseURL != "" {
		return c.ListenDatabaseURL
	}
	return c.DatabaseURL
}

// checkConnString refuses what libpq would not take as a connection string.
func checkConnString(v string) error {
	p, err := postgres.ParseConnString(v)
	if err != nil {
		return fmt.Errorf("must be a postgres:// URL or key=value pairs, as libpq takes them: %w", err)
	}
	return p.CheckDriverSupport()
}

// minLeaderLeaseTTL is the shortest leadership lease accepted: leaders renew
// every third of it.
const minLeaderLeaseTTL = time.Second

// minConnTimeout is the shortest database timeout accepted: shorter ones
// would cancel ordinary statements or close healthy connections.
const minConnTimeout = 100 * time.Millisecond

// ConfigError is a configuration mistake; the process exits with code 2.
type ConfigError struct{ Err error }

// Error implements error.
func (e *ConfigError) Error() string { return "invalid configuration: " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// setting is one configuration variable: its environment name, its flag
// name, and how to parse it into the config.
type setting struct {
	env, flag, usage string
	set              func(c *Config, v string) error
	get              func(c *Config) string
}

func settings() []setting {
	return []setting{
		{"TASKMASTER_DATABASE_URL", "database-url", "PostgreSQL connection string: postgres://user@host1:5432,host2:5432/db?... or host=host1,host2 dbname=db ... (a writable primary among the hosts)",
			func(c *Config, v string) error { c.DatabaseURL = v; return nil },
			func(c *Config) string { return c.DatabaseURL }},
		{"TASKMASTER_LISTEN_DATABASE_URL", "listen-database-url", "PostgreSQL connection string of the session that LISTENs for task wake-ups, when TASKMASTER_DATABASE_URL goes through a transaction-pooling PgBouncer (empty: TASKMASTER_DATABASE_URL)",
			func(c *Config, v string) error { c.ListenDatabaseURL = v; return nil },
			func(c *Config) string { return c.ListenDatabaseURL }},
		{"TASKMASTER_READ_DATABASE_URL", "read-database-url", "PostgreSQL connection string of a read replica (a hot standby): listings, queue statistics and the dashboard's pages read from it while it keeps up (empty: the primary)",
			func(c *Config, v string) error { c.ReadDatabaseURL = v; return nil },
			func(c *Config) string { return c.ReadDatabaseURL }},
		{"TASKMASTER_READ_MAX_LAG_MS", "read-max-lag-ms", "the primary serves the reads that may lag while the read replica is more than this behind",
			millisSetter(func(c *Config, d time.Duration) { c.ReadMaxLag = d }),
			func(c *Config) string { return millis(c.ReadMaxLag) }},
		{"TASKMASTER_HTTP_ADDR", "http-addr", "listen address host:port",
			func(c *Config, v string) error { c.HTTP.Addr = v; return nil },
			func(c *Config) string { return c.HTTP.Addr }},
		{"TASKMASTER_MAX_BODY_BYTES", "max-body-bytes", "largest request body accepted",
			intSetter(func(c *Config, n int) { c.HTTP.MaxBodyBytes = int64(n) }),
			func(c *Config) string { return strconv.FormatInt(c.HTTP.MaxBodyBytes, 10) }},
		{"TASKMASTER_MAX_BATCH_BODY_BYTES", "max-batch-body-bytes", "largest batch request body accepted",
			intSetter(func(c *Config, n int) { c.HTTP.MaxBatchBodyBytes = int64(n) }),
			func(c *Config) string { return strconv.FormatInt(c.HTTP.MaxBatchBodyBytes, 10) }},
		{"TASKMASTER_MAX_RESPONSE_BYTES", "max-response-bytes", "estimated size past which a claim or listing stops adding tasks",
			intSetter(func(c *Config, n int) { c.App.MaxResponseBytes = int64(n) }),
			func(c *Config) string { return strconv.FormatInt(c.App.MaxResponseBytes, 10) }},
		{"TASKMASTER_MAX_INFLIGHT_REQUESTS", "max-inflight-requests", "requests served at once, claims and event streams apart (503 beyond)",
			intSetter(func(c *Config, n int) { c.HTTP.MaxInFlightRequests = n }),
			func(c *Config) string { return strconv.Itoa(c.HTTP.MaxInFlightRequests) }},
		{"TASKMASTER_MAX_INFLIGHT_CLAIMS", "max-inflight-claims", "claims served at once, long polls included (503 beyond)",
			intSetter(func(c *Config, n int) { c.HTTP.MaxInFlightClaims = n }),
			func(c *Config) string { return strconv.Itoa(c.HTTP.MaxInFlightClaims) }},
		{"TASKMASTER_MAX_INFLIGHT_WAITS", "max-inflight-waits", "requests waiting for a task to finish (wait_ms) served at once (503 beyond)",
			intSetter(func(c *Config, n int) { c.HTTP.MaxInFlightWaits = n }),
			func(c *Config) string { return strconv.Itoa(c.HTTP.MaxInFlightWaits) }},
		{"TASKMASTER_MAX_INFLIGHT_BODY_BYTES", "max-inflight-body-bytes", "request body bytes buffered at once (503 beyond)",
			intSetter(func(c *Config, n int) { c.HTTP.MaxInFlightBodyBytes = int64(n) }),
			func(c *Config) string { return strconv.FormatInt(c.HTTP.MaxInFlightBodyBytes, 10) }},
		{"TASKMASTER_BATCH_REQUESTS", "batch-requests", "most concurrent claims, or concurrent reports (complete, fail, extend), one shared transaction serves (1: each its own)",
			intSetter(func(c *Config, n int) { c.App.BatchRequests = n }),
			func(c *Config) string { return strconv.Itoa(c.App.BatchRequests) }},
		{"TASKMASTER_BATCH_CONCURRENCY", "batch-concurrency", "shared transactions of claims, and of reports, that may run at once",
			intSetter(func(c *Config, n int) { c.App.ConcurrentBatches = n }),
			func(c *Config) string { return strconv.Itoa(c.App.ConcurrentBatches) }},
		{"TASKMASTER_BATCH_OVERLAP_AT", "batch-overlap-at", "requests that must wait for a running shared transaction before another of its kind starts beside it (0: a full batch, TASKMASTER_BATCH_REQUESTS; 1: at once)",
			intSetter(func(c *Config, n int) { c.App.BatchOverlapAt = n }),
			func(c *Config) string { return strconv.Itoa(c.App.BatchOverlapAt) }},
		{"TASKMASTER_CLAIM_POLL_INTERVAL_MS", "claim-poll-interval-ms", "how often a long-poll claim on a rate-limited or capped queue looks again",
			millisSetter(func(c *Config, d time.Duration) { c.App.ClaimPollInterval = d }),
			func(c *Config) string { return millis(c.App.ClaimPollInterval) }},
		{"TASKMASTER_CLAIM_SAFETY_INTERVAL_MS", "claim-safety-interval-ms", "how often any other long-poll claim looks again without a notification",
			millisSetter(func(c *Config, d time.Duration) { c.App.ClaimSafetyInterval = d }),
			func(c *Config) string { return millis(c.App.ClaimSafetyInterval) }},
		{"TASKMASTER_AWAIT_SAFETY_INTERVAL_MS", "await-safety-interval-ms", "how often a request waiting for a task to finish (wait_ms) looks again without a notification",
			millisSetter(func(c *Config, d time.Duration) { c.App.AwaitSafetyInterval = d }),
			func(c *Config) string { return millis(c.App.AwaitSafetyInterval) }},
		{"TASKMASTER_DB_MAX_CONNS", "db-max-conns", "database connection pool size",
			intSetter(func(c *Config, n int) { c.Pool.MaxOpen, c.Pool.MaxIdle = n, n }),
			func(c *Config) string { return strconv.Itoa(c.Pool.MaxOpen) }},
		{"TASKMASTER_DB_STATEMENT_TIMEOUT_MS", "db-statement-timeout-ms", "statement_timeout of every database session (0: none; migrations lift it)",
			optionalMillisSetter(func(c *Config, d time.Duration) { c.Pool.Conn.StatementTimeout = d }),
			func(c *Config) string { return millis(c.Pool.Conn.StatementTimeout) }},
		{"TASKMASTER_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", "db-idle-in-transaction-timeout-ms", "idle_in_transaction_session_timeout of every database session (0: none)",
			optionalMillisSetter(func(c *Config, d time.Duration) { c.Pool.Conn.IdleInTransactionTimeout = d }),
			func(c *Config) string { return millis(c.Pool.Conn.IdleInTransactionTimeout) }},
		{"TASKMASTER_DB_TCP_USER_TIMEOUT_MS", "db-tcp-user-timeout-ms", "close a database connection unacknowledged or silent to keepalives this long, on both ends (0: OS defaults)",
			optionalMillisSetter(func(c *Config, d time.Duration) { c.Pool.Conn.TCPUserTimeout = d }),
			func(c *Config) string { return millis(c.Pool.Conn.TCPUserTimeout) }},
		{"TASKMASTER_DB_STATEMENT_CACHE_SIZE", "db-statement-cache-size", "prepared statements each database connection keeps (0: none, every statement parsed and planned each time; default 0 with TASKMASTER_DB_TRANSACTION_POOLING=on)",
			func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return errors.New("must be a whole number, 0 or more")
				}
				c.Pool.StatementCacheSize = n
				if n == 0 {
					c.Pool.StatementCacheSize = -1
				}
				return nil
			},
			func(c *Config) string {
				if c.Pool.StatementCacheSize == 0 {
					return strconv.Itoa(postgres.DefaultStatementCacheSize)
				}
				return strconv.Itoa(max(c.Pool.StatementCacheSize, 0))
			}},
		{"TASKMASTER_DB_TRANSACTION_POOLING", "db-transaction-pooling", "on when TASKMASTER_DATABASE_URL goes through a transaction-pooling PgBouncer: no prepared statements kept; needs TASKMASTER_LISTEN_DATABASE_URL",
			func(c *Config, v string) error {
				switch strings.ToLower(strings.TrimSpace(v)) {
				case "on", "true", "1":
					c.TransactionPooling = true
				case "off", "false", "0":
					c.TransactionPooling = false
				default:
					return errors.New("must be on or off")
				}
				return nil
			},
			func(c *Config) string {
				if c.TransactionPooling {
					return "on"
				}
				return "off"
			}},
		{"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS", "heartbeat-stale-threshold-seconds", "silence before a worker is STALE",
			secondsSetter(func(c *Config, d time.Duration) { c.App.Liveness.StaleAfter = d }),
			func(c *Config) string { return seconds(c.App.Liveness.StaleAfter) }},
		{"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS", "heartbeat-dead-threshold-seconds", "silence before a worker is DEAD",
			secondsSetter(func(c *Config, d time.Duration) { c.App.Liveness.DeadAfter = d }),
			func(c *Config) string { return seconds(c.App.Liveness.DeadAfter) }},
		{"TASKMASTER_REAPER_INTERVAL_MS", "reaper-interval-ms", "heartbeat reaper period",
			millisSetter(func(c *Config, d time.Duration) { c.ReaperInterval = d }),
			func(c *Config) string { return millis(c.ReaperInterval) }},
		{"TASKMASTER_DEADLINE_REAPER_INTERVAL_MS", "deadline-reaper-interval-ms", "deadline reaper period",
			millisSetter(func(c *Config, d time.Duration) { c.DeadlineReaperInterval = d }),
			func(c *Config) string { return millis(c.DeadlineReaperInterval) }},
		{"TASKMASTER_LEASE_DEFAULT_SECONDS", "lease-default-seconds", "lease of a claim that asks for none (whole seconds, 1-43200)",
			intSetter(func(c *Config, n int) { c.App.DefaultLeaseSeconds = n }),
			func(c *Config) string { return strconv.Itoa(c.App.DefaultLeaseSeconds) }},
		{"TASKMASTER_LEASE_REAPER_INTERVAL_MS", "lease-reaper-interval-ms", "lease reaper period",
			millisSetter(func(c *Config, d time.Duration) { c.LeaseReaperInterval = d }),
			func(c *Config) string { return millis(c.LeaseReaperInterval) }},
		{"TASKMASTER_TIMEOUT_REAPER_INTERVAL_MS", "timeout-reaper-interval-ms", "timeout reaper period (an attempt's time limit is enforced within about this much of its end)",
			millisSetter(func(c *Config, d time.Duration) { c.TimeoutReaperInterval = d }),
			func(c *Config) string { return millis(c.TimeoutReaperInterval) }},
		{"TASKMASTER_RETRY_BASE_DELAY_SECONDS", "retry-base-delay-seconds", "backoff base: delay = min(2^attempts x base, 5 min)",
			secondsSetter(func(c *Config, d time.Duration) { c.App.Backoff.Base = d }),
			func(c *Config) string { return seconds(c.App.Backoff.Base) }},
		{"TASKMASTER_LEADER_LEASE_SECONDS", "leader-lease-seconds", "a background job's leader that stops renewing its lease (frozen, gone) is replaced after this long plus one tick",
			secondsSetter(func(c *Config, d time.Duration) { c.LeaderLeaseTTL = d }),
			func(c *Config) string { return seconds(c.LeaderLeaseTTL) }},
		{"TASKMASTER_RETENTION_TTL", "retention-ttl", "keep finished tasks and dead workers this long (s/m/h/d; 0 disables)",
			func(c *Config, v string) error { d, err := ParseTTL(v); c.RetentionTTL = d; return err },
			func(c *Config) string { return c.RetentionTTL.String() }},
		{"TASKMASTER_RETENTION_INTERVAL_MS", "retention-interval-ms", "retention reaper period",
			millisSetter(func(c *Config, d time.Duration) { c.RetentionInterval = d }),
			func(c *Config) string { return millis(c.RetentionInterval) }},
		{"TASKMASTER_RETENTION_BATCH_SIZE", "retention-batch-size", "rows deleted per retention statement",
			intSetter(func(c *Config, n int) { c.RetentionBatchSize = n }),
			func(c *Config) string { return strconv.Itoa(c.RetentionBatchSize) }},
		{"TASKMASTER_SCHEDULER_INTERVAL_MS", "scheduler-interval-ms", "how often the scheduler runs the due ticks of recurring schedules (a tick runs up to this late)",
			millisSetter(func(c *Config, d time.Duration) { c.SchedulerInterval = d }),
			func(c *Config) string { return millis(c.SchedulerInterval) }},
		{"TASKMASTER_OUTBOX_POLL_INTERVAL_MS", "outbox-poll-interval-ms", "how often caught-up outbox consumers and event streams look for new events",
			millisSetter(func(c *Config, d time.Duration) { c.Outbox.PollInterval = d }),
			func(c *Config) string { return millis(c.Outbox.PollInterval) }},
		{"TASKMASTER_OUTBOX_JANITOR_INTERVAL_MS", "outbox-janitor-interval-ms", "outbox janitor period (deletes events every consumer group has consumed)",
			millisSetter(func(c *Config, d time.Duration) { c.Outbox.JanitorInterval = d }),
			func(c *Config) string { return millis(c.Outbox.JanitorInterval) }},
		{"TASKMASTER_OUTBOX_RETENTION", "outbox-retention", "keep consumed events this long for resuming event streams (s/m/h/d; 0 deletes once consumed)",
			func(c *Config, v string) error { d, err := ParseTTL(v); c.Outbox.Retention = d; return err },
			func(c *Config) string { return c.Outbox.Retention.String() }},
		{"TASKMASTER_EVENTS_HEARTBEAT_SECONDS", "events-heartbeat-seconds", "keep-alive interval of GET /events/v1 streams",
			secondsSetter(func(c *Config, d time.Duration) { c.HTTP.EventsHeartbeat = d }),
			func(c *Config) string { return seconds(c.HTTP.EventsHeartbeat) }},
		{"TASKMASTER_EVENTS_MAX_STREAMS", "events-max-streams", "GET /events/v1 streams one instance serves at once (503 beyond)",
			intSetter(func(c *Config, n int) { c.Outbox.MaxStreams = n }),
			func(c *Config) string { return strconv.Itoa(c.Outbox.MaxStreams) }},
		{"TASKMASTER_METRICS_MAX_QUEUES", "metrics-max-queues", "queues with per-queue series of their own in /metrics; the others are summed under queue=\"_other\"",
			intSetter(func(c *Config, n int) { c.MetricsMaxQueues = n }),
			func(c *Config) string { return strconv.Itoa(c.MetricsMaxQueues) }},
		{"TASKMASTER_PPROF_ADDR", "pprof-addr", "serve /debug/pprof/ on this address (empty: off)",
			func(c *Config, v string) error { c.PprofAddr = v; return nil },
			func(c *Config) string { return c.PprofAddr }},
		{"TASKMASTER_LOG_LEVEL", "log-level", "debug, info, warn or error",
			func(c *Config, v string) error { c.LogLevel = v; return nil },
			func(c *Config) string { return c.LogLevel }},
		{"TASKMASTER_LOG_FORMAT", "log-format", "json or console",
			func(c *Config, v string) error { c.LogFormat = v; return nil },
			func(c *Config) string { return c.LogFormat }},
	}
}

// LoadConfig builds the config from defaults, then environment variables
// (getenv), then flags (args). Every mistake is reported in one
// *ConfigError naming the variable.
func LoadConfig(name string, args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	cfg := DefaultConfig()
	var errs []error
	all := append(append(settings(), securitySettings()...), pushSettings()...)
	for _, s := range all {
		if v := getenv(s.env); v != "" {
			if err := s.set(&cfg, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", s.env, v, err))
			}
		}
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range all {
		s := s
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %s)", s.usage, s.env, s.get(&cfg)), func(v string) error {
			if err := s.set(&cfg, v); err != nil {
				return fmt.Errorf("%s: %w", s.env, err)
			}
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return cfg, &ConfigError{Err: err}
	}
	tc, err := telemetry.ConfigFromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.Telemetry = tc
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " ")))
	}
	if err := errors.Join(errs...); err != nil {
		return cfg, &ConfigError{Err: err}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, &ConfigError{Err: err}
	}
	return cfg, nil
}

// ParseTTL parses a duration with an s, m, h or d suffix ("7d", "36h",
// "90m", "0"); a bare number is seconds.
func ParseTTL(v string) (time.Duration, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, errors.New("is empty")
	}
	unit := time.Second
	switch v[len(v)-1] {
	case 's':
		v = v[:len(v)-1]
	case 'm':
		unit, v = time.Minute, v[:len(v)-1]
	case 'h':
		unit, v = time.Hour, v[:len(v)-1]
	case 'd':
		unit, v = 24*time.Hour, v[:len(v)-1]
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) || f*float64(unit) > math.MaxInt64 {
		return 0, errors.New("must be a non-negative number with an optional s, m, h or d suffix")
	}
	return time.Duration(f * float64(unit)), nil
}

func parseSeconds(v string, unit time.Duration) (time.Duration, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || f*float64(unit) > math.MaxInt64 {
		return 0, errors.New("must be a positive number")
	}
	return time.Duration(f * float64(unit)), nil
}

func secondsSetter(apply func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := parseSeconds(v, time.Second)
		apply(c, d)
		return err
	}
}

func millisSetter(apply func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := parseSeconds(v, time.Millisecond)
		apply(c, d)
		return err
	}
}

// optionalMillisSetter parses milliseconds where 0 means off.
func optionalMillisSetter(apply func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f == 0 {
			apply(c, 0)
			return nil
		}
		d, err := parseSeconds(v, time.Millisecond)
		if err != nil {
			return errors.New("must be 0 or a positive number")
		}
		apply(c, d)
		return nil
	}
}

func intSetter(apply func(*Config, int)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return errors.New("must be an integer")
		}
		apply(c, n)
		return nil
	}
}

func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) }

func millis(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
}
