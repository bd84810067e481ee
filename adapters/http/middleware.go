package http

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/ports"
)

// HeaderCorrelationID carries the request's correlation id both ways.
const HeaderCorrelationID = "X-Correlation-Id"

// validCorrelationID reports whether id may serve as a correlation id: 1-128
// characters of A-Z a-z 0-9 . _ : / = + - (checked by hand: the regexp it
// replaces cost more than the rest of the middleware).
func validCorrelationID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '/' || c == '=' || c == '+' || c == '-':
		default:
			return false
		}
	}
	return true
}

type loggerKey struct{}

// requestLog is a request's logger: base with fields, made on first use,
// since most requests log nothing (zap's With costs allocations per call).
type requestLog struct {
	base   *zap.Logger
	fields []zap.Field
	once   sync.Once
	logger *zap.Logger
}

func (l *requestLog) get() *zap.Logger {
	l.once.Do(func() { l.logger = l.base.With(l.fields...) })
	return l.logger
}

// with is the log of the same request with more fields.
func (l *requestLog) with(fields ...zap.Field) *requestLog {
	return &requestLog{base: l.base, fields: append(l.fields[:len(l.fields):len(l.fields)], fields...)}
}

func correlationID(ctx context.Context) string { return ports.CorrelationID(ctx) }

func requestLogFrom(ctx context.Context) *requestLog {
	if l, ok := ctx.Value(loggerKey{}).(*requestLog); ok {
		return l
	}
	return &requestLog{base: zap.NewNop()}
}

func loggerFrom(ctx context.Context) *zap.Logger { return requestLogFrom(ctx).get() }

// withCorrelation accepts the client's X-Correlation-Id (or makes one),
// echoes it, and puts it and a logger carrying it into the request context.
func withCorrelation(base *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get(HeaderCorrelationID)
			if !validCorrelationID(id) {
				id = uuid.NewString()
			}
			w.Header().Set(HeaderCorrelationID, id)
			ctx := ports.WithCorrelationID(r.Context(), id)
			ctx = context.WithValue(ctx, loggerKey{}, &requestLog{base: base, fields: []zap.Field{zap.String("correlation_id", id)}})
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets streaming handlers flush through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ObserveFunc receives each finished request: its route template (or
// "unmatched"), method, status and duration.
type ObserveFunc func(route, method string, status int, elapsed time.Duration)

// withAccessLog recovers panics as 500 problems, logs each request at debug
// level and reports it to observe.
func withAccessLog(observe ObserveFunc) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			rec := &statusRecorder{ResponseWriter: w}
			route := &matchedRoute{template: "unmatched"}
			r = r.WithContext(context.WithValue(r.Context(), matchedRouteKey{}, route))
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					writeError(rec, r, fmt.Errorf("panic: %v", v))
				}
				elapsed := time.Since(start)
				status := rec.status
				if status == 0 {
					status = http.StatusOK
				}
				if l := requestLogFrom(r.Context()); l.base.Core().Enabled(zap.DebugLevel) {
					l.get().Debug("request",
						zap.String("method", r.Method), zap.String("path", r.URL.Path),
						zap.Int("status", status), zap.Duration("elapsed", elapsed))
				}
				if observe != nil {
					observe(route.template, r.Method, status, elapsed)
				}
			}()
			next.ServeHTTP(rec, r)
		})
	}
}

// matchedRoute carries the route template the router matched back out to
// the access log, so the request is matched once.
type matchedRoute struct{ template string }

type matchedRouteKey struct{}

// withRoute is router middleware (it runs after matching): it records the
// route template, caps the request body at the route's limit (decode turns
// the overflow into 413), and admits the request under the instance's caps
// (adm) or refuses it with 503 overloaded.
func withRoute(cfg ServerConfig, adm *admission) mux.MiddlewareFunc {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tpl := ""
			if cur := mux.CurrentRoute(r); cur != nil {
				tpl, _ = cur.GetPathTemplate()
			}
			if m, ok := r.Context().Value(matchedRouteKey{}).(*matchedRoute); ok && tpl != "" {
				m.template = tpl
			}
			limit := cfg.MaxBodyBytes
			if batchRoutes[tpl] {
				limit = cfg.MaxBatchBodyBytes
			}
			release, refused := adm.admit(r, tpl, limit)
			if refused != "" {
				writeProblem(w, r, newProblem(kindOverloaded, refused+"; retry after the Retry-After delay", nil))
				return
			}
			defer release()
			if r.Body != nil {
				r.Body = http.MaxBytesReader(w, r.Body, limit)
			}
			next.ServeHTTP(w, r)
		})
	}
}
