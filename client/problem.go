package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// ProblemTypePrefix starts every problem type URI the server uses.
const ProblemTypePrefix = "urn:problem-type:taskmaster:"

// Problem types: Problem.Type is one of these (branch on them, not on Title
// or Detail).
const (
	// ProblemMalformedRequest (400): malformed JSON, an unknown field, a wrong type.
	ProblemMalformedRequest = ProblemTypePrefix + "malformed-request"
	// ProblemBodyTooLarge (413): the request body exceeds the server's limit.
	ProblemBodyTooLarge = ProblemTypePrefix + "body-too-large"
	// ProblemValidation (422): well-formed but invalid input; see Problem.Errors.
	ProblemValidation = ProblemTypePrefix + "validation-error"
	// ProblemTaskNotFound (404): no task has this id.
	ProblemTaskNotFound = ProblemTypePrefix + "task-not-found"
	// ProblemWorkerNotFound (404): no worker has this id; register first.
	ProblemWorkerNotFound = ProblemTypePrefix + "worker-not-found"
	// ProblemWorkerDead (409): the worker was declared dead; register again.
	ProblemWorkerDead = ProblemTypePrefix + "worker-dead"
	// ProblemLeaseLost (409): the task is held by another worker or lease.
	ProblemLeaseLost = ProblemTypePrefix + "lease-lost"
	// ProblemInvalidTransition (409): the task's status does not allow it.
	ProblemInvalidTransition = ProblemTypePrefix + "invalid-transition"
	// ProblemNotFound (404): no route matches.
	ProblemNotFound = ProblemTypePrefix + "not-found"
	// ProblemMethodNotAllowed (405): the route does not answer this method.
	ProblemMethodNotAllowed = ProblemTypePrefix + "method-not-allowed"
	// ProblemUnavailable (503): the server is not ready.
	ProblemUnavailable = ProblemTypePrefix + "unavailable"
	// ProblemInternal (500): an unexpected server error.
	ProblemInternal = ProblemTypePrefix + "internal-error"
)

// FieldError is one offending field of a validation problem.
type FieldError struct {
	// Field is the field as sent (snake_case) or a path such as "tags[3]".
	Field string `json:"field"`
	// Message says what is wrong.
	Message string `json:"message"`
}

// Problem is an error the server reported: an RFC 9457 problem details
// body. Answers that are not problem bodies (a proxy's HTML 502, say) are
// turned into a Problem with Type "about:blank" and the body's start as
// Detail.
type Problem struct {
	// Type is a stable URI, one of the Problem* constants.
	Type string `json:"type"`
	// Title is a constant summary of Type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence, for a human.
	Detail string `json:"detail,omitempty"`
	// Instance is the request path.
	Instance string `json:"instance,omitempty"`
	// CorrelationID is the request's correlation id; quote it when reporting.
	CorrelationID string `json:"correlation_id,omitempty"`
	// Errors lists the offending fields of a validation problem.
	Errors []FieldError `json:"errors,omitempty"`
	// CurrentStatus is the task's status on lease-lost and invalid-transition.
	CurrentStatus Status `json:"current_status,omitempty"`
	// RequiredScopes, on a 403 forbidden, are the scopes the key lacks (it
	// needs one of them).
	RequiredScopes []string `json:"required_scopes,omitempty"`
	// Queue, on a 403 forbidden, is the queue the key may not use.
	Queue string `json:"queue,omitempty"`
	// WorkerID, on a 403 forbidden, is the worker the key may not act as.
	WorkerID string `json:"worker_id,omitempty"`
}

// Error implements error.
func (p *Problem) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "taskmaster: %d", p.Status)
	if s := p.Slug(); s != "" {
		b.WriteString(" " + s)
	}
	if p.Detail != "" {
		b.WriteString(": " + p.Detail)
	} else if p.Title != "" {
		b.WriteString(": " + p.Title)
	}
	for _, f := range p.Errors {
		fmt.Fprintf(&b, "; %s %s", f.Field, f.Message)
	}
	if p.CorrelationID != "" {
		b.WriteString(" (correlation id " + p.CorrelationID + ")")
	}
	return b.String()
}

// Slug returns the short name of Type ("lease-lost"), or "" for a type that
// is not one of the server's.
func (p *Problem) Slug() string {
	s, ok := strings.CutPrefix(p.Type, ProblemTypePrefix)
	if !ok {
		return ""
	}
	return s
}

// AsProblem returns the *Problem in err's chain.
func AsProblem(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}

func isType(err error, types ...string) bool {
	p, ok := AsProblem(err)
	if !ok {
		return false
	}
	for _, t := range types {
		if p.Type == t {
			return true
		}
	}
	return false
}

// IsLeaseLost reports whether err is a 409 lease-lost: another worker or a
// newer lease holds the task. Drop the task; never retry the report.
func IsLeaseLost(err error) bool { return isType(err, ProblemLeaseLost) }

// IsInvalidTransition reports whether err is a 409 invalid-transition: the
// task's status (Problem.CurrentStatus) does not allow the change.
func IsInvalidTransition(err error) bool { return isType(err, ProblemInvalidTransition) }

// IsWorkerDead reports whether err is a 409 worker-dead: register again.
func IsWorkerDead(err error) bool { return isType(err, ProblemWorkerDead) }

// IsWorkerNotFound reports whether err is a 404 worker-not-found.
func IsWorkerNotFound(err error) bool { return isType(err, ProblemWorkerNotFound) }

// IsNotFound reports whether err is any 404 problem (task, worker or route).
func IsNotFound(err error) bool {
	p, ok := AsProblem(err)
	return ok && p.Status == http.StatusNotFound
}

// IsValidation reports whether err is a 422 validation-error (see
// Problem.Errors).
func IsValidation(err error) bool { return isType(err, ProblemValidation) }

// IsConflict reports whether err is any 409 problem.
func IsConflict(err error) bool {
	p, ok := AsProblem(err)
	return ok && p.Status == http.StatusConflict
}

const maxProblemBody = 64 << 10

// decodeProblem reads a non-2xx response into a Problem.
func decodeProblem(resp *http.Response) *Problem {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		var p Problem
		if err := json.Unmarshal(raw, &p); err == nil && p.Type != "" {
			if p.Status == 0 {
				p.Status = resp.StatusCode
			}
			return &p
		}
	}
	detail := strings.TrimSpace(string(raw))
	if len(detail) > 512 {
		detail = detail[:512] + "..."
	}
	return &Problem{Type: "about:blank", Title: http.StatusText(resp.StatusCode), Status: resp.StatusCode, Detail: detail}
}
