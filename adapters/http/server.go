// Package http is the REST adapter: a gorilla/mux router over the driving
// ports, RFC 9457 problem responses, correlation ids and request logging.
package http

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/ports"
)

// ServerConfig configures the HTTP server.
type ServerConfig struct {
	// Addr is the listen address, host:port (port 0 picks a free one).
	Addr string
	// MaxBodyBytes caps request bodies (413 beyond).
	MaxBodyBytes int64
	// MaxBatchBodyBytes caps the bodies of the batch endpoints, which carry
	// up to 1,000 items.
	MaxBatchBodyBytes int64
	// ShutdownTimeout bounds the wait for in-flight requests on Stop.
	ShutdownTimeout time.Duration
	// EventsHeartbeat is the interval of keep-alive comments on event
	// streams (GET /events/v1); 0 means 15 s, the default.
	EventsHeartbeat time.Duration
	// MaxInFlightRequests caps the requests served at once, claims, event
	// streams and the operational endpoints apart (see admission); beyond
	// it, 503 overloaded. 0 means DefaultMaxInFlightRequests, and likewise
	// for the two caps below.
	MaxInFlightRequests int
	// MaxInFlightClaims caps the claims served at once, long polls
	// included; beyond it, 503 overloaded.
	MaxInFlightClaims int
	// MaxInFlightWaits caps the requests waiting for a task to finish
	// (wait_ms) served at once; beyond it, 503 overloaded.
	MaxInFlightWaits int
	// MaxInFlightBodyBytes caps the request body bytes the requests served
	// at once may buffer; beyond it, 503 overloaded. It must be at least
	// MaxBatchBodyBytes, or the largest batch could never be served.
	MaxInFlightBodyBytes int64
	// Auth turns API key authentication on or off (AuthAuto: on unless
	// Addr is a loopback address); see auth.go.
	Auth AuthMode
	// RateLimits are the per-key request limits by scope.
	RateLimits RateLimits
	// ClientRateLimit limits, per client address, the attempts made without
	// a working credential (a token or session that names nothing usable)
	// and the dashboard's logins; zero Rate: no limit.
	ClientRateLimit RateLimit
	// TLS, when enabled, serves HTTPS with a certificate reloaded by
	// ReloadTLS.
	TLS TLSConfig
	// EventsWriteTimeout bounds one write to an event stream's client (a
	// client that takes longer ends its stream); 0 means 10 s.
	EventsWriteTimeout time.Duration
}

// Defaults of the admission caps (see admission).
const (
	// DefaultMaxInFlightRequests is MaxInFlightRequests unless configured.
	DefaultMaxInFlightRequests = 256
	// DefaultMaxInFlightClaims is MaxInFlightClaims unless configured: 1,000
	// idle long-polling workers per instance fit twice over.
	DefaultMaxInFlightClaims = 2000
	// DefaultMaxInFlightWaits is MaxInFlightWaits unless configured: 1,000
	// producers waiting for their tasks per instance fit twice over.
	DefaultMaxInFlightWaits = 2000
	// DefaultMaxInFlightBodyBytes is MaxInFlightBodyBytes unless
	// configured: four batch bodies of the largest size.
	DefaultMaxInFlightBodyBytes = 64 << 20
)

// DefaultServerConfig returns the defaults: 127.0.0.1:8080, 1 MiB bodies
// (16 MiB for batches), event stream heartbeats every 15 s, and the
// admission caps above.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Addr: "127.0.0.1:8080", MaxBodyBytes: 1 << 20, MaxBatchBodyBytes: 16 << 20, ShutdownTimeout: 30 * time.Second,
		EventsHeartbeat:     defaultEventsHeartbeat,
		MaxInFlightRequests: DefaultMaxInFlightRequests, MaxInFlightClaims: DefaultMaxInFlightClaims,
		MaxInFlightWaits:     DefaultMaxInFlightWaits,
		MaxInFlightBodyBytes: DefaultMaxInFlightBodyBytes, RateLimits: DefaultRateLimits(), ClientRateLimit: DefaultClientRateLimit}
}

// Validate reports whether the config can be used.
func (c ServerConfig) Validate() error {
	if c.Addr == "" {
		return errors.New("http address is required")
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("http address %q: %w", c.Addr, err)
	}
	if c.MaxBodyBytes < 1024 || c.MaxBatchBodyBytes < 1024 {
		return errors.New("max body sizes must be at least 1024 bytes")
	}
	return nil
}

// ValidateAdmission checks the admission caps, one error per cap (nil when
// it is fine): the request and claim caps must be at least 1, and the body
// byte cap at least the largest body accepted, or that body could never be
// served. (A zero cap in a ServerConfig built by hand means the default.)
func (c ServerConfig) ValidateAdmission() (requests, claims, bodyBytes error) {
	if c.MaxInFlightRequests < 1 {
		requests = errors.New("must be at least 1")
	}
	if c.MaxInFlightClaims < 1 {
		claims = errors.New("must be at least 1")
	}
	if largest := max(c.MaxBodyBytes, c.MaxBatchBodyBytes); c.MaxInFlightBodyBytes < largest {
		bodyBytes = fmt.Errorf("must be at least the largest request body accepted (%d bytes)", largest)
	}
	return requests, claims, bodyBytes
}

// Route is an extra route another adapter mounts (metrics, events, ...).
type Route struct {
	Path    string
	Methods []string
	Handler http.Handler
	// Access is what the route asks of a request (a route without one is
	// never served).
	Access Access
	// Prefix mounts Handler for every path under Path (which should end in
	// "/"), as the dashboard is under /ui/.
	Prefix bool
}

// Deps are the driving ports the handlers call.
type Deps struct {
	Tasks   ports.TaskService
	Workers ports.WorkerService
	Queues  ports.QueueService
	Health  ports.HealthChecker
	Logger  *zap.Logger
	// Events, when set, serves GET /events/v1.
	Events ports.EventStreams
	// Keys authenticates requests (required when authentication is on)
	// and serves the admin API of keys.
	Keys ports.KeyService
	// Schedules serves the recurring schedules.
	Schedules ports.ScheduleService
	// Bulk, when set, serves the bulk actions and queue purges.
	Bulk ports.BulkService
	// Workflows, when set, serves the runs (GET /workflows/v1/{id}, its
	// cancel and retry).
	Workflows ports.WorkflowService
	// Limits are the rate limits the server enforces, shared with the
	// dashboard; nil: the server makes its own from the config.
	Limits *Limits
	// NamedLimits, when set, serves the named limits (/limits/v1).
	NamedLimits ports.LimitService
	// Observe, when set, receives every finished request.
	Observe ObserveFunc
	// Routes are extra routes to mount.
	Routes []Route
	// OnShutdown runs when Stop begins, before in-flight requests are
	// awaited (it answers waiting long-poll claims).
	OnShutdown []func()
	// Tracer, when set, records the server's spans (see tracing.go); nil:
	// tracing is off and costs nothing.
	Tracer trace.Tracer
	// Reads serve the reads that may lag; its zero fields fall back to the
	// services above.
	Reads Reads
}

// Reads are the services of the reads that may lag behind the primary,
// which a read replica may serve (TASKMASTER_READ_DATABASE_URL): the
// listings of tasks, workers and schedules, and the queue statistics and
// detail. Reads that must see what a request just wrote (a task by id,
// claims, reports, everything that changes state) never use them.
type Reads struct {
	Tasks     ports.TaskService
	Workers   ports.WorkerService
	Queues    ports.QueueService
	Schedules ports.ScheduleService
}

// or completes r with d's services where it has none.
func (r Reads) or(d Deps) Reads {
	if r.Tasks == nil {
		r.Tasks = d.Tasks
	}
	if r.Workers == nil {
		r.Workers = d.Workers
	}
	if r.Queues == nil {
		r.Queues = d.Queues
	}
	if r.Schedules == nil {
		r.Schedules = d.Schedules
	}
	return r
}

// Server serves the API.
type Server struct {
	cfg         ServerConfig
	tasks       ports.TaskService
	workers     ports.WorkerService
	queues      ports.QueueService
	health      ports.HealthChecker
	events      ports.EventStreams
	logger      *zap.Logger
	extraRoutes []Route
	onShutdown  []func()
	router      *mux.Router
	handler     http.Handler
	admission   *admission
	keys        ports.KeyService
	schedules   ports.ScheduleService
	bulk        ports.BulkService
	workflows   ports.WorkflowService
	tracer      trace.Tracer
	// reads serve the reads that may lag (Deps.Reads, completed).
	reads       Reads
	namedLimits ports.LimitService
	// auth says requests must carry a key; access holds each route's
	// requirement, limiter each key's rate limit.
	auth   bool
	access map[*mux.Route]Access
	limits *Limits
	// jsonRoutes are the API's routes, which take JSON bodies (the extra
	// routes, such as the dashboard's forms, take their own).
	jsonRoutes map[*mux.Route]bool
	// cert is the TLS certificate (nil: plain HTTP).
	cert *certificate

	lifecycle.Base
	mu       sync.Mutex
	listener net.Listener
	// stopping is closed when Stop begins, to end event streams, which
	// would otherwise keep Shutdown waiting; each Start makes a new one.
	stopping chan struct{}
}

var _ lifecycle.Service = (*Server)(nil)

// NewServer builds the server and its router.
func NewServer(cfg ServerConfig, d Deps) *Server {
	s := &Server{
		cfg: cfg, tasks: d.Tasks, workers: d.Workers, queues: d.Queues, health: d.Health,
		events: d.Events, logger: d.Logger, extraRoutes: d.Routes, onShutdown: d.OnShutdown,
		keys: d.Keys, schedules: d.Schedules, bulk: d.Bulk, workflows: d.Workflows, tracer: d.Tracer, auth: cfg.AuthEnabled(), access: map[*mux.Route]Access{}, jsonRoutes: map[*mux.Route]bool{},
		limits: d.Limits, namedLimits: d.NamedLimits,
	}
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	if s.limits == nil {
		s.limits = NewLimits(cfg.RateLimits, cfg.ClientRateLimit)
	}
	s.reads = d.Reads.or(d)
	if cfg.TLS.Enabled() {
		s.cert = &certificate{cfg: cfg.TLS}
	}
	// No path cleaning: gorilla/mux would answer a non-canonical path
	// (/workers/v1//heartbeat, an encoded ../) with a 301 and an empty
	// body, which a client following it turns from POST into GET. No route
	// has such a path: it is a 404 problem like any unknown one.
	r := mux.NewRouter().SkipClean(true)
	s.routes(r)
	s.router = r
	// Runs once the router has matched: it names the route for the access
	// log and metrics, caps the body by route and admits the request under
	// the in-flight caps by route (no second match); then the route's
	// access is enforced.
	s.admission = newAdmission(cfg)
	r.Use(withRoute(cfg, s.admission))
	if s.tracer != nil {
		r.Use(s.withTracing)
	}
	r.Use(s.withJSONBody)
	r.Use(s.withAuth)
	r.Use(s.withTextQuery)
	h := s.withLocalRequests(r)
	h = withAccessLog(d.Observe)(h)
	h = withCorrelation(s.logger)(h)
	s.handler = h
	return s
}

// InFlight returns what the requests served at the moment hold of the
// admission caps (for metrics).
func (s *Server) InFlight() InFlight { return s.admission.inFlight() }

// Handler returns the full handler chain (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// RouteInfo is one route on the router: its path template (in the router's
// syntax, e.g. /tasks/v1/{id}), the methods it answers and its access.
type RouteInfo struct {
	Path    string
	Methods []string
	Access  Access
}

// Routes lists every route on the router, extra routes included, in the
// order they were registered. Tests use it to check the API description
// covers the whole surface.
func (s *Server) Routes() []RouteInfo {
	var out []RouteInfo
	_ = s.router.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return nil // a route without a path (none today)
		}
		methods, _ := route.GetMethods() // no methods: any method
		out = append(out, RouteInfo{Path: path, Methods: methods, Access: s.access[route]})
		return nil
	})
	return out
}

// Start listens and serves in the background until Stop.
func (s *Server) Start(ctx context.Context) error {
	return s.StartLoop(ctx, "http server", func(context.Context) (lifecycle.LoopFunc, error) {
		if s.cert != nil {
			if err := s.cert.load(); err != nil {
				return nil, err
			}
		}
		ln, err := net.Listen("tcp", s.cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
		}
		stopping := make(chan struct{})
		s.mu.Lock()
		s.listener, s.stopping = ln, stopping
		s.mu.Unlock()
		srv := &http.Server{
			Handler:           s.handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       60 * time.Second,
			WriteTimeout:      90 * time.Second,
			IdleTimeout:       120 * time.Second,
			ErrorLog:          zap.NewStdLog(s.logger.Named("http")),
		}
		if s.cert != nil {
			srv.TLSConfig = s.cert.tlsConfig()
		}
		s.logger.Info("http server listening", zap.String("addr", ln.Addr().String()),
			zap.Bool("tls", s.cert != nil), zap.Bool("auth", s.auth))
		return func(ctx context.Context) { s.serve(ctx, srv, ln, stopping) }, nil
	})
}

// serve serves on ln until ctx ends, then shuts down: it ends event
// streams, runs the OnShutdown hooks (answering waiting claims), stops
// accepting connections and waits for in-flight requests up to the shutdown
// timeout.
func (s *Server) serve(ctx context.Context, srv *http.Server, ln net.Listener, stopping chan struct{}) {
	served := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			served <- srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig
			return
		}
		served <- srv.Serve(ln)
	}()
	select {
	case err := <-served:
		s.logger.Error("http server stopped", zap.Error(err))
		<-ctx.Done()
		return
	case <-ctx.Done():
	}
	close(stopping)
	for _, f := range s.onShutdown {
		f()
	}
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.logger.Warn("http shutdown: requests still running were cut off", zap.Error(err))
		_ = srv.Close()
	}
	<-served
}

// stoppingSignal is closed when the running server begins to stop.
func (s *Server) stoppingSignal() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// Addr returns the address the server listens on (after Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener == nil {
		return ""
	}
	return s.listener.Addr().String()
}

// Stop ends event streams, answers waiting claims, stops accepting
// connections, waits for in-flight requests (up to the shutdown timeout),
// and returns when the server has stopped (or ctx ends). It is idempotent,
// and the server can be started again.
func (s *Server) Stop(ctx context.Context) error {
	if err := s.StopLoop(ctx); err != nil {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}
