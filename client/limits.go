package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Named limits (docs/api.md "Named limits"): a budget several queues share.

// Problem types of named limits.
const (
	// ProblemLimitNotFound (404): no named limit has this name.
	ProblemLimitNotFound = ProblemTypePrefix + "limit-not-found"
	// ProblemLimitInUse (409): queues name the limit; remove it from their
	// limits first.
	ProblemLimitInUse = ProblemTypePrefix + "limit-in-use"
)

// IsLimitNotFound reports whether err is a 404 limit-not-found.
func IsLimitNotFound(err error) bool { return isType(err, ProblemLimitNotFound) }

// IsLimitInUse reports whether err is a 409 limit-in-use.
func IsLimitInUse(err error) bool { return isType(err, ProblemLimitInUse) }

// Limit is a named limit: a token bucket (PerSecond, Burst) and a cap on
// RUNNING tasks (MaxRunning) that the queues naming it share.
type Limit struct {
	Name       string   `json:"name"`
	PerSecond  *float64 `json:"per_second"`
	Burst      *int     `json:"burst"`
	MaxRunning *int     `json:"max_running"`
	// Queues are the queues naming it.
	Queues []string `json:"queues"`
	// Running counts their RUNNING tasks now.
	Running int `json:"running"`
	// Tokens is the bucket's level now (nil without PerSecond).
	Tokens    *float64  `json:"tokens"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// LimitParams are a named limit's values; PutLimit replaces them all. At
// least one of PerSecond and MaxRunning.
type LimitParams struct {
	PerSecond *float64 `json:"per_second,omitempty"`
	// Burst defaults to one second's tokens.
	Burst      *int `json:"burst,omitempty"`
	MaxRunning *int `json:"max_running,omitempty"`
}

// PutLimit creates or replaces a named limit (admin); created is true for
// a new one. Queues draw on it once they name it (QueuePatch.Limits).
func (c *Client) PutLimit(ctx context.Context, name string, p LimitParams) (l *Limit, created bool, err error) {
	var out Limit
	status, err := c.do(ctx, call{method: http.MethodPut, path: limitPath(name), body: p, out: &out, mode: retrySafe})
	if err != nil {
		return nil, false, err
	}
	return &out, status == http.StatusCreated, nil
}

// Limit returns one named limit.
func (c *Client) Limit(ctx context.Context, name string) (*Limit, error) {
	var out Limit
	if _, err := c.do(ctx, call{method: http.MethodGet, path: limitPath(name), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Limits returns every named limit, by name.
func (c *Client) Limits(ctx context.Context) ([]Limit, error) {
	var out struct {
		Limits []Limit `json:"limits"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/limits/v1", out: &out}); err != nil {
		return nil, err
	}
	return out.Limits, nil
}

// DeleteLimit deletes a named limit that no queue names (admin;
// IsLimitInUse otherwise) and returns its values as they were.
func (c *Client) DeleteLimit(ctx context.Context, name string) (*Limit, error) {
	var out Limit
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: limitPath(name), out: &out, mode: retrySafe}); err != nil {
		return nil, err
	}
	return &out, nil
}

func limitPath(name string) string { return "/limits/v1/" + url.PathEscape(name) }
