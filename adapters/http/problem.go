package http

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// ProblemTypePrefix starts every problem type URI; the suffix is a stable
// slug such as "validation-error".
const ProblemTypePrefix = "urn:problem-type:taskmaster:"

// Problem is an RFC 9457 problem details body.
type Problem struct {
	// Type identifies the kind of problem (a stable URI).
	Type string `json:"type"`
	// Title is a constant summary of the type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, for a human.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// CorrelationID is the request's correlation id.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Errors lists offending fields on validation problems.
	Errors []validation.FieldError `json:"errors,omitempty"`
	// CurrentStatus is the task's status on conflicts.
	CurrentStatus string `json:"current_status,omitempty"`
	// RequiredScopes, on a forbidden problem, are the scopes of which the
	// key lacks every one.
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Queue, on a forbidden problem, is the queue the key may not use ("*":
	// every queue).
	Queue string `json:"queue,omitempty"`
	// WorkerID, on a forbidden problem, is the worker the key may not act
	// as.
	WorkerID string `json:"worker_id,omitempty"`

	// retryAfter, when positive, is sent as the Retry-After header (seconds).
	retryAfter int
}

// problemKind is one row of the error table.
type problemKind struct {
	slug   string
	title  string
	status int
}

var (
	kindMalformed      = problemKind{"malformed-request", "Malformed request", http.StatusBadRequest}
	kindTooLarge       = problemKind{"body-too-large", "Request body too large", http.StatusRequestEntityTooLarge}
	kindValidation     = problemKind{"validation-error", "Invalid input", http.StatusUnprocessableEntity}
	kindTaskNotFound   = problemKind{"task-not-found", "Task not found", http.StatusNotFound}
	kindWorkerNF       = problemKind{"worker-not-found", "Worker not found", http.StatusNotFound}
	kindWorkerDead     = problemKind{"worker-dead", "Worker is dead", http.StatusConflict}
	kindLeaseLost      = problemKind{"lease-lost", "Lease lost", http.StatusConflict}
	kindTransition     = problemKind{"invalid-transition", "Invalid state transition", http.StatusConflict}
	kindRoute          = problemKind{"not-found", "Not found", http.StatusNotFound}
	kindMethod         = problemKind{"method-not-allowed", "Method not allowed", http.StatusMethodNotAllowed}
	kindUnavailable    = problemKind{"unavailable", "Service unavailable", http.StatusServiceUnavailable}
	kindOverloaded     = problemKind{"overloaded", "Server at capacity", http.StatusServiceUnavailable}
	kindUnauthorized   = problemKind{"unauthorized", "Unauthorized", http.StatusUnauthorized}
	kindForbidden      = problemKind{"forbidden", "Forbidden", http.StatusForbidden}
	kindRateLimited    = problemKind{"rate-limited", "Too many requests", http.StatusTooManyRequests}
	kindMediaType      = problemKind{"unsupported-media-type", "Unsupported media type", http.StatusUnsupportedMediaType}
	kindHostNotAllowed = problemKind{"host-not-allowed", "Host not allowed", http.StatusForbidden}
	kindCrossOrigin    = problemKind{"cross-origin", "Cross-origin request", http.StatusForbidden}
	kindKeyNotFound    = problemKind{"key-not-found", "API key not found", http.StatusNotFound}
	kindScheduleNF     = problemKind{"schedule-not-found", "Schedule not found", http.StatusNotFound}
	kindScheduleDup    = problemKind{"schedule-exists", "Schedule exists", http.StatusConflict}
	kindQueueNF        = problemKind{"queue-not-found", "Queue not found", http.StatusNotFound}
	kindLimitNF        = problemKind{"limit-not-found", "Limit not found", http.StatusNotFound}
	kindLimitInUse     = problemKind{"limit-in-use", "Limit in use", http.StatusConflict}
	kindUniqueKey      = problemKind{"unique-key-taken", "Unique key taken", http.StatusConflict}
	kindPurgeJobNF     = problemKind{"purge-job-not-found", "Purge job not found", http.StatusNotFound}
	kindWorkflowNF     = problemKind{"workflow-not-found", "Workflow not found", http.StatusNotFound}
	kindCancelReq      = problemKind{"cancel-requested", "Cancel requested", http.StatusConflict}
	kindStreamsFull    = problemKind{"too-many-streams", "Too many event streams", http.StatusServiceUnavailable}
	kindInternal       = problemKind{"internal-error", "Internal server error", http.StatusInternalServerError}
)

// retryAfter is the Retry-After header (whole seconds) of every answer of the
// transient kinds. A database restart takes seconds (docs/operations.md); a
// full instance frees capacity as fast as requests finish.
var retryAfter = map[problemKind]int{
	kindUnavailable: 2,
	kindOverloaded:  1,
	kindStreamsFull: 5,
}

// requestError is a client mistake found while decoding a request.
type requestError struct {
	kind   problemKind
	detail string
	fields []validation.FieldError
}

func (e *requestError) Error() string { return e.detail }

func badRequest(format string, args ...any) error {
	return &requestError{kind: kindMalformed, detail: fmt.Sprintf(format, args...)}
}

// problemFor is the one table from error to problem. Anything it does not
// know is an internal error.
func problemFor(err error) Problem {
	var (
		reqErr    *requestError
		valErr    *validation.Error
		leaseErr  *task.LeaseError
		transErr  *task.TransitionError
		replayErr *task.ReplayError
		forbidden *apikey.ForbiddenError
		keyErr    *task.UniqueKeyError
		inUse     *queue.LimitInUseError
	)
	switch {
	case errors.As(err, &reqErr):
		return newProblem(reqErr.kind, reqErr.detail, func(p *Problem) { p.Errors = reqErr.fields })
	case errors.As(err, &valErr):
		return newProblem(kindValidation, "the request has invalid fields; see errors", func(p *Problem) { p.Errors = valErr.Fields })
	case errors.As(err, &leaseErr):
		return newProblem(kindLeaseLost, leaseDetail(leaseErr), func(p *Problem) { p.CurrentStatus = string(leaseErr.Status) })
	case errors.As(err, &transErr):
		return newProblem(kindTransition, transitionDetail(transErr), func(p *Problem) { p.CurrentStatus = string(transErr.From) })
	case errors.As(err, &replayErr):
		return newProblem(kindTransition, fmt.Sprintf("the task is %s: only a DONE or DEAD task can be replayed", replayErr.Status),
			func(p *Problem) { p.CurrentStatus = string(replayErr.Status) })
	case errors.Is(err, task.ErrCancelRequested):
		return newProblem(kindCancelReq, "an operator asked to cancel the task: it may not spawn more; stop it and fail it", func(p *Problem) {
			p.CurrentStatus = string(task.StatusRunning)
		})
	case errors.Is(err, task.ErrNotFound):
		return newProblem(kindTaskNotFound, "no task has this id", nil)
	case errors.Is(err, task.ErrWorkflowNotFound):
		return newProblem(kindWorkflowNF, "no task belongs to a workflow with this id", nil)
	case errors.Is(err, worker.ErrNotFound):
		return newProblem(kindWorkerNF, "no worker has this id; register first", nil)
	case errors.Is(err, worker.ErrDead):
		return newProblem(kindWorkerDead, "the worker was declared dead; register again", nil)
	case errors.Is(err, ports.ErrUnavailable):
		return newProblem(kindUnavailable, unavailableDetail, nil)
	case apikey.Unauthenticated(err):
		return newProblem(kindUnauthorized, unauthenticatedDetail(err), nil)
	case errors.As(err, &forbidden):
		return newProblem(kindForbidden, forbidden.Reason, func(p *Problem) {
			p.Queue, p.WorkerID = forbidden.Queue, forbidden.WorkerID
			for _, s := range forbidden.Scopes {
				p.RequiredScopes = append(p.RequiredScopes, string(s))
			}
		})
	case errors.Is(err, apikey.ErrNotFound):
		return newProblem(kindKeyNotFound, "no API key has this id", nil)
	case errors.Is(err, schedule.ErrNotFound):
		return newProblem(kindScheduleNF, "no schedule has this name", nil)
	case errors.Is(err, queue.ErrNotFound):
		return newProblem(kindQueueNF, "no queue has this name: it holds no task and has no settings", nil)
	case errors.Is(err, queue.ErrLimitNotFound):
		return newProblem(kindLimitNF, "no named limit has this name", nil)
	case errors.As(err, &inUse):
		return newProblem(kindLimitInUse, fmt.Sprintf("queues %s name the limit: remove it from their limits first",
			strings.Join(inUse.Queues, ", ")), nil)
	case errors.Is(err, schedule.ErrExists):
		return newProblem(kindScheduleDup, "a schedule with this name exists; change it with PATCH, or delete it first", nil)
	case errors.As(err, &keyErr):
		return newProblem(kindUniqueKey, "another unfinished task of the queue holds the task's unique_key; retry it once that one has finished", nil)
	case errors.Is(err, ports.ErrPurgeJobNotFound):
		return newProblem(kindPurgeJobNF, "no purge job of this queue has this id", nil)
	case errors.Is(err, ports.ErrTooManyStreams):
		return newProblem(kindStreamsFull, "this instance serves as many event streams as it may; try again after Retry-After seconds", nil)
	case errors.Is(err, ports.ErrStreamsStopped):
		return newProblem(kindUnavailable, "the server is stopping; try again after Retry-After seconds", nil)
	default:
		return newProblem(kindInternal, "an unexpected error occurred; quote the correlation id when reporting it", nil)
	}
}

func leaseDetail(e *task.LeaseError) string {
	if e.Status == task.StatusPending {
		return "the lease is gone: the task was taken back and is PENDING again"
	}
	return fmt.Sprintf("the task is %s and held by another worker or under another lease", e.Status)
}

func transitionDetail(e *task.TransitionError) string {
	if e.To == "" {
		return fmt.Sprintf("the task is %s, not RUNNING", e.From)
	}
	return fmt.Sprintf("the task is %s and cannot move to %s", e.From, e.To)
}

// unavailableDetail explains a database outage to the client, including
// what a write that was cut off while committing means.
const unavailableDetail = "the database is unavailable; retry after the Retry-After delay. " +
	"A write whose connection broke while it committed may have been applied: " +
	"repeat it with the same idempotency key or lease, which makes the retry safe"

func newProblem(k problemKind, detail string, with func(*Problem)) Problem {
	p := Problem{Type: ProblemTypePrefix + k.slug, Title: k.title, Status: k.status, Detail: detail, retryAfter: retryAfter[k]}
	if with != nil {
		with(&p)
	}
	return p
}

// writeError answers r with the problem for err. Only unexpected errors
// (500) are logged, once, with the request's correlation id: a 503 says the
// database is down or the instance is full, which /readyz, the background
// jobs' logs and the request metrics already show, once per outage rather
// than once per request (its cause is logged at debug level).
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		// The client went away (or the server is stopping) mid-request:
		// nothing failed that anyone should be paged for.
		writeProblem(w, r, newProblem(kindUnavailable, "the request was cancelled before it finished", nil))
		return
	}
	p := problemFor(err)
	if apikey.Unauthenticated(err) {
		// Also a key revoked while its request ran (a waiting claim).
		w.Header().Set("WWW-Authenticate", challenge(err))
	}
	if p.Status >= 500 && p.retryAfter == 0 {
		loggerFrom(r.Context()).Error("request failed", zap.Error(err), zap.String("method", r.Method), zap.String("path", r.URL.Path))
	} else if p.Status >= 500 {
		loggerFrom(r.Context()).Debug("request refused", zap.Error(err), zap.String("method", r.Method), zap.String("path", r.URL.Path))
	}
	writeProblem(w, r, p)
}

func writeProblem(w http.ResponseWriter, r *http.Request, p Problem) {
	p.Instance = r.URL.EscapedPath() // a URI reference, as RFC 9457 asks
	p.CorrelationID = correlationID(r.Context())
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	writeJSONType(w, p.Status, "application/problem+json", p)
}
