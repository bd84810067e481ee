package http

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/ports"
)

// HeaderCorrelationID carries the request's correlation id both ways.
const HeaderCorrelationID = "X-Correlation-Id"

var correlationPattern = regexp.MustCompile(`^[A-Za-z0-9._:/=+-]{1,128}$`)

type loggerKey struct{}

func correlationID(ctx context.Context) string { return ports.CorrelationID(ctx) }

func loggerFrom(ctx context.Context) *zap.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*zap.Logger); ok {
		return l
	}
	return zap.NewNop()
}

// withCorrelation accepts the client's X-Correlation-Id (or makes one),
// echoes it, and puts it and a logger carrying it into the request context.
func withCorrelation(base *zap.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get(HeaderCorrelationID)
			if !correlationPattern.MatchString(id) {
				id = uuid.NewString()
			}
			w.Header().Set(HeaderCorrelationID, id)
			ctx := ports.WithCorrelationID(r.Context(), id)
			ctx = context.WithValue(ctx, loggerKey{}, base.With(zap.String("correlation_id", id)))
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
				loggerFrom(r.Context()).Debug("request",
					zap.String("method", r.Method), zap.String("path", r.URL.Path),
					zap.Int("status", status), zap.Duration("elapsed", elapsed))
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
