package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Problem types of authentication, authorization and rate limiting.
const (
	// ProblemUnauthorized (401): no API key, or one that is unknown, revoked
	// or expired. Set one with WithAPIKey.
	ProblemUnauthorized = ProblemTypePrefix + "unauthorized"
	// ProblemForbidden (403): the key lacks a scope (Problem.RequiredScopes),
	// may not use a queue (Problem.Queue), or may not act as a worker that
	// another key registered (Problem.WorkerID).
	ProblemForbidden = ProblemTypePrefix + "forbidden"
	// ProblemRateLimited (429): the key's rate limit is exhausted; the
	// client retries after the server's Retry-After.
	ProblemRateLimited = ProblemTypePrefix + "rate-limited"
	// ProblemKeyNotFound (404): no API key has this id.
	ProblemKeyNotFound = ProblemTypePrefix + "key-not-found"
)

// EnvAPIKey is the environment variable the CLI and `taskmaster worker`
// read the API key from.
const EnvAPIKey = "TASKMASTER_API_KEY"

// WithAPIKey sends key (tmk_...) as "Authorization: Bearer <key>" on every
// request. Servers with authentication on refuse requests without one.
func WithAPIKey(key string) Option { return func(c *Client) { c.apiKey = key } }

// IsUnauthorized reports whether err is a 401: no usable API key.
func IsUnauthorized(err error) bool { return isType(err, ProblemUnauthorized) }

// IsForbidden reports whether err is a 403: the key may not do this.
func IsForbidden(err error) bool { return isType(err, ProblemForbidden) }

// Key is an API key as the admin API shows it (never its token).
type Key struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Scopes       []string   `json:"scopes"`
	Queues       []string   `json:"queues"`
	WorkerPrefix *string    `json:"worker_prefix"`
	CreatedAt    time.Time  `json:"created_at"`
	LastUsedAt   *time.Time `json:"last_used_at"`
	ExpiresAt    *time.Time `json:"expires_at"`
	RevokedAt    *time.Time `json:"revoked_at"`
}

// CreatedKey is a new key and its token, which the server shows only once.
type CreatedKey struct {
	Key
	// Token is the secret to send as the bearer token ("key" in JSON).
	Token string `json:"key"`
}

// CreateKeyParams describe a new key.
type CreateKeyParams struct {
	Name string `json:"name"`
	// Scopes: admin, produce, work, read.
	Scopes []string `json:"scopes"`
	// Queues, when not empty, limits the key to these queues (a trailing
	// "*" makes a prefix: "emails-*").
	Queues []string `json:"queues,omitempty"`
	// WorkerPrefix, when set, limits a work key to worker ids starting with
	// it.
	WorkerPrefix string `json:"worker_prefix,omitempty"`
	// ExpiresIn, when positive, makes the key expire that long after its
	// creation (whole seconds, on the server's database clock).
	ExpiresIn time.Duration `json:"-"`
}

// CreateKey makes an API key (admin scope). The token in the answer is
// the only copy: store it now.
func (c *Client) CreateKey(ctx context.Context, p CreateKeyParams) (*CreatedKey, error) {
	body := struct {
		CreateKeyParams
		ExpiresInSeconds *int64 `json:"expires_in_seconds,omitempty"`
	}{CreateKeyParams: p}
	if p.ExpiresIn > 0 {
		s := int64((p.ExpiresIn + time.Second - 1) / time.Second)
		body.ExpiresInSeconds = &s
	}
	var out CreatedKey
	// Not resent after a possible delivery: a retry could make a second key.
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/admin/v1/keys", body: body, out: &out, mode: retryUnsent}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Keys lists every API key, revoked and expired ones included (admin
// scope).
func (c *Client) Keys(ctx context.Context) ([]Key, error) {
	var out struct {
		Keys []Key `json:"keys"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/admin/v1/keys", out: &out}); err != nil {
		return nil, err
	}
	return out.Keys, nil
}

// RevokeKey stops a key from working on every instance within a second
// (admin scope). Revoking a revoked key changes nothing.
func (c *Client) RevokeKey(ctx context.Context, id string) (*Key, error) {
	var out Key
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: "/admin/v1/keys/" + url.PathEscape(id), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}
