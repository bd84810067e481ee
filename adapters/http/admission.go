package http

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// Admission caps what one instance serves at once, so that memory and
// goroutines stay bounded whatever the clients do. Beyond a cap a request is
// refused at once with a 503 `overloaded` problem and Retry-After, before
// its body is read and before it touches the database: a refused request
// changes nothing.
//
// The rule for which cap counts a request, by the route it matched:
//
//   - POST /tasks/v1/claim counts against MaxInFlightClaims. A claim may
//     long-poll for up to 30 s holding no database connection, so claims get
//     a cap of their own, sized for many idle workers (the default fits
//     1,000 workers each with a long poll open, twice over).
//   - GET /tasks/v1/{id} and POST /tasks/v1 with a wait_ms query parameter
//     (other than 0) wait up to 60 s for a task to finish, holding no
//     database connection: they count against MaxInFlightWaits, sized for
//     many idle producers like the claims' cap.
//   - GET /events/v1 streams for as long as the client stays; event streams
//     have their own cap (the events adapter's), not this one.
//   - The operational endpoints (/healthz, /readyz, /metrics,
//     /actuator/prometheus, /openapi.yaml) are never refused, so an instance
//     at capacity stays observable.
//   - Every other request counts against MaxInFlightRequests.
//
// Independently, every request's body counts against MaxInFlightBodyBytes
// while it is served: its Content-Length (at most the route's body limit),
// or the route's whole limit when the length is not announced (chunked).
type admission struct {
	requests  limit
	claims    limit
	waits     limit
	bodyBytes limit
}

// Routes counted apart from MaxInFlightRequests (see admission).
var (
	claimRoutes = map[string]bool{"/tasks/v1/claim": true}
	// waitRoutes wait for a task to finish when asked to (wait_ms).
	waitRoutes   = map[string]string{"/tasks/v1/{id}": http.MethodGet, "/tasks/v1": http.MethodPost}
	streamRoutes = map[string]bool{"/events/v1": true}
	// operationalRoutes are never refused.
	operationalRoutes = map[string]bool{
		"/healthz": true, "/readyz": true, "/metrics": true, "/actuator/prometheus": true, "/openapi.yaml": true,
	}
)

// newAdmission returns the caps of cfg; a zero cap is the default.
func newAdmission(cfg ServerConfig) *admission {
	orDefault := func(n, def int64) int64 {
		if n <= 0 {
			return def
		}
		return n
	}
	return &admission{
		requests:  limit{max: orDefault(int64(cfg.MaxInFlightRequests), DefaultMaxInFlightRequests)},
		claims:    limit{max: orDefault(int64(cfg.MaxInFlightClaims), DefaultMaxInFlightClaims)},
		waits:     limit{max: orDefault(int64(cfg.MaxInFlightWaits), DefaultMaxInFlightWaits)},
		bodyBytes: limit{max: orDefault(cfg.MaxInFlightBodyBytes, DefaultMaxInFlightBodyBytes)},
	}
}

// admit takes what the request r, matched to route template tpl with body
// limit bodyLimit, needs. It returns the function that gives it back, or
// the reason for refusing it.
func (a *admission) admit(r *http.Request, tpl string, bodyLimit int64) (release func(), refused string) {
	var count *limit
	switch {
	case operationalRoutes[tpl], streamRoutes[tpl]:
	case claimRoutes[tpl]:
		count = &a.claims
	case waitRoutes[tpl] == r.Method && waits(r):
		count = &a.waits
	default:
		count = &a.requests
	}
	if count != nil && !count.tryAcquire(1) {
		switch count {
		case &a.claims:
			return nil, fmt.Sprintf("this instance serves at most %d claims at once (long polls included)", count.max)
		case &a.waits:
			return nil, fmt.Sprintf("this instance serves at most %d requests waiting for a task (wait_ms) at once", count.max)
		}
		return nil, fmt.Sprintf("this instance serves at most %d requests at once", count.max)
	}
	body := bodyReservation(r, bodyLimit)
	if body > 0 && !a.bodyBytes.tryAcquire(body) {
		if count != nil {
			count.release(1)
		}
		return nil, fmt.Sprintf("this instance buffers at most %d bytes of request bodies at once", a.bodyBytes.max)
	}
	return func() {
		if count != nil {
			count.release(1)
		}
		a.bodyBytes.release(body)
	}, ""
}

// InFlight is what the requests served at the moment hold of the admission
// caps.
type InFlight struct {
	// Requests are the requests counted against MaxInFlightRequests.
	Requests int64
	// Claims are the claims (long polls included) counted against
	// MaxInFlightClaims.
	Claims int64
	// Waits are the requests waiting for a task (wait_ms) counted
	// against MaxInFlightWaits.
	Waits int64
	// BodyBytes are the body bytes reserved against MaxInFlightBodyBytes.
	BodyBytes int64
}

func (a *admission) inFlight() InFlight {
	return InFlight{Requests: a.requests.n.Load(), Claims: a.claims.n.Load(), Waits: a.waits.n.Load(), BodyBytes: a.bodyBytes.n.Load()}
}

// waits reports whether r asks to wait for its task (a wait_ms query
// parameter other than empty or 0; a malformed one is refused by the
// handler, which waits for nothing then).
func waits(r *http.Request) bool {
	v := r.URL.Query().Get("wait_ms")
	return v != "" && v != "0"
}

// bodyReservation is how many body bytes serving r may buffer: its announced
// length, capped at the route's limit (decode refuses more with 413), or the
// whole limit when the length is unknown.
func bodyReservation(r *http.Request, bodyLimit int64) int64 {
	switch {
	case r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0:
		return 0
	case r.ContentLength < 0:
		return bodyLimit
	default:
		return min(r.ContentLength, bodyLimit)
	}
}

// limit is a counter with a ceiling that is never waited on: an acquisition
// that would pass the ceiling fails at once.
type limit struct {
	max int64
	n   atomic.Int64
}

// tryAcquire adds k unless that would pass max.
func (l *limit) tryAcquire(k int64) bool {
	for {
		cur := l.n.Load()
		if cur+k > l.max {
			return false
		}
		if l.n.CompareAndSwap(cur, cur+k) {
			return true
		}
	}
}

// release gives back k.
func (l *limit) release(k int64) { l.n.Add(-k) }
