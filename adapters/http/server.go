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
	"go.uber.org/zap"

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
}

// DefaultServerConfig returns the defaults: 127.0.0.1:8080, 1 MiB bodies,
// event stream heartbeats every 15 s.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{Addr: "127.0.0.1:8080", MaxBodyBytes: 1 << 20, MaxBatchBodyBytes: 16 << 20, ShutdownTimeout: 30 * time.Second,
		EventsHeartbeat: defaultEventsHeartbeat}
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

// Route is an extra route another adapter mounts (metrics, events, ...).
type Route struct {
	Path    string
	Methods []string
	Handler http.Handler
}

// Deps are the driving ports the handlers call.
type Deps struct {
	Tasks   ports.TaskService
	Workers ports.WorkerService
	Queues  ports.QueueService
	Health  ports.HealthChecker
	Logger  *zap.Logger
	// Events, when set, serves GET /events/v1.
	Events ports.EventFeed
	// Observe, when set, receives every finished request.
	Observe ObserveFunc
	// Routes are extra routes to mount.
	Routes []Route
	// OnShutdown runs when Stop begins, before in-flight requests are
	// awaited (it answers waiting long-poll claims).
	OnShutdown []func()
}

// Server serves the API.
type Server struct {
	cfg         ServerConfig
	tasks       ports.TaskService
	workers     ports.WorkerService
	queues      ports.QueueService
	health      ports.HealthChecker
	events      ports.EventFeed
	logger      *zap.Logger
	extraRoutes []Route
	onShutdown  []func()
	router      *mux.Router
	handler     http.Handler

	// stopping is closed when Stop begins, to end event streams, which
	// would otherwise keep Shutdown waiting.
	stopping     chan struct{}
	stoppingOnce sync.Once

	mu       sync.Mutex
	srv      *http.Server
	listener net.Listener
	done     chan struct{}
}

// NewServer builds the server and its router.
func NewServer(cfg ServerConfig, d Deps) *Server {
	s := &Server{
		cfg: cfg, tasks: d.Tasks, workers: d.Workers, queues: d.Queues, health: d.Health,
		events: d.Events, logger: d.Logger, extraRoutes: d.Routes, onShutdown: d.OnShutdown, stopping: make(chan struct{}),
	}
	if s.logger == nil {
		s.logger = zap.NewNop()
	}
	r := mux.NewRouter()
	s.routes(r)
	s.router = r
	// Runs once the router has matched: it names the route for the access
	// log and metrics and caps the body by route (no second match).
	r.Use(withRoute(cfg))
	var h http.Handler = r
	h = withAccessLog(d.Observe)(h)
	h = withCorrelation(s.logger)(h)
	s.handler = h
	return s
}

// Handler returns the full handler chain (for tests and embedding).
func (s *Server) Handler() http.Handler { return s.handler }

// RouteInfo is one route on the router: its path template (in the router's
// syntax, e.g. /tasks/v1/{id}) and the methods it answers.
type RouteInfo struct {
	Path    string
	Methods []string
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
		out = append(out, RouteInfo{Path: path, Methods: methods})
		return nil
	})
	return out
}

// Start listens and serves in the background until Stop.
func (s *Server) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("http server already started")
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.listener = ln
	s.srv = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      90 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          zap.NewStdLog(s.logger.Named("http")),
	}
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", zap.Error(err))
		}
	}()
	s.logger.Info("http server listening", zap.String("addr", ln.Addr().String()))
	return nil
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

// Stop ends event streams, runs the OnShutdown hooks (answering waiting
// claims), stops accepting connections, waits for in-flight
// requests (up to the shutdown timeout or ctx), and returns when the server
// has stopped. It is idempotent.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	s.stoppingOnce.Do(func() {
		close(s.stopping)
		for _, f := range s.onShutdown {
			f()
		}
	})
	if s.cfg.ShutdownTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
		defer cancel()
	}
	err := srv.Shutdown(ctx)
	<-done
	if err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}
