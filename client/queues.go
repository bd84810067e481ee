package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ProblemQueueNotFound (404): no queue has this name (it holds no task and
// has no settings).
const ProblemQueueNotFound = ProblemTypePrefix + "queue-not-found"

// IsQueueNotFound reports whether err is a 404 queue-not-found.
func IsQueueNotFound(err error) bool { return isType(err, ProblemQueueNotFound) }

// QueueSettings are how an operator steers a queue; a nil limit is none.
type QueueSettings struct {
	// Paused: claims hand out nothing from the queue; submissions wait.
	Paused bool `json:"paused"`
	// MaxRunning caps the queue's RUNNING tasks across all workers.
	MaxRunning *int `json:"max_running"`
	// RateLimit caps the claims per second.
	RateLimit *RateLimit `json:"rate_limit"`
	// MaxRunningPerGroup caps the RUNNING tasks of each group_key.
	MaxRunningPerGroup *int `json:"max_running_per_group"`
	// DefaultTimeoutSeconds limits each attempt of the queue's tasks that
	// have no TimeoutSeconds of their own, from its claim.
	DefaultTimeoutSeconds *int `json:"default_timeout_seconds"`
	// RateLimitPerGroup gives each group_key a token bucket of its own.
	RateLimitPerGroup *RateLimit `json:"rate_limit_per_group"`
	// Limits are the named limits the queue draws on (see PutLimit).
	Limits []string `json:"limits"`
	// Push, when set, makes the queue a push queue (see PushSettings).
	Push *PushSettings `json:"push"`
}

// RateLimit is a token bucket shared by every instance: claims take one
// token per task; it refills at PerSecond and holds at most Burst (0 when
// setting: the server's default, one second's worth).
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst,omitempty"`
}

// ListQueuesParams filter and page the queue listing.
type ListQueuesParams struct {
	// Prefix keeps the queues whose names start with it.
	Prefix string
	// Pattern keeps the queues whose names match a glob: * any characters,
	// ? one character.
	Pattern string
	// MinPending, when set, keeps the queues with at least this many
	// PENDING tasks.
	MinPending *int64
	// Paused, when set, keeps the paused (true) or the other queues.
	Paused *bool
	// Limit is the page size (0: the server's default, 100; at most 1000).
	Limit int
	// Cursor continues a listing (QueuePage.NextCursor).
	Cursor string
}

// QueuePage is a page of queues, by name.
type QueuePage struct {
	Queues []Queue `json:"queues"`
	// NextCursor continues the listing ("" on the last page).
	NextCursor string `json:"next_cursor"`
}

// ListQueues returns a page of queues (those that hold tasks or have
// settings), by name.
func (c *Client) ListQueues(ctx context.Context, p ListQueuesParams) (*QueuePage, error) {
	q := url.Values{}
	if p.Prefix != "" {
		q.Set("prefix", p.Prefix)
	}
	if p.Pattern != "" {
		q.Set("pattern", p.Pattern)
	}
	if p.MinPending != nil {
		q.Set("min_pending", strconv.FormatInt(*p.MinPending, 10))
	}
	if p.Paused != nil {
		q.Set("paused", strconv.FormatBool(*p.Paused))
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var page struct {
		Queues     []Queue `json:"queues"`
		NextCursor *string `json:"next_cursor"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/queues/v1", query: q, out: &page}); err != nil {
		return nil, err
	}
	out := &QueuePage{Queues: page.Queues}
	if page.NextCursor != nil {
		out.NextCursor = *page.NextCursor
	}
	return out, nil
}

// Queues returns the statistics of every queue that holds tasks or has
// settings, ordered by name, reading every page of the listing (with many
// queues, prefer ListQueues). They are eventually consistent: see Queue.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	var out []Queue
	p := ListQueuesParams{Limit: 1000}
	for {
		page, err := c.ListQueues(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Queues...)
		if page.NextCursor == "" {
			if out == nil {
				out = []Queue{}
			}
			return out, nil
		}
		p.Cursor = page.NextCursor
	}
}

// QueueDetail is one queue's statistics with its RUNNING tasks and its
// average durations.
type QueueDetail struct {
	Queue
	// Leased counts the queue's RUNNING tasks now.
	Leased int64 `json:"leased"`
	// LeasedSample shows up to 20 of them, the longest held first.
	LeasedSample []LeasedTask `json:"leased_sample"`
	// AvgExecutionSeconds and AvgQueueWaitSeconds are keyed RateLast5m and
	// RateLast15m; nil when no task's attempt ended (was claimed) then.
	AvgExecutionSeconds map[string]*float64 `json:"avg_execution_seconds"`
	AvgQueueWaitSeconds map[string]*float64 `json:"avg_queue_wait_seconds"`
	// Deliveries are a push queue's recent deliveries (nil for another
	// queue, or when no dispatcher reported in the last minute).
	Deliveries *Deliveries `json:"deliveries"`
}

// LeasedTask is one RUNNING task of a queue.
type LeasedTask struct {
	ID             string    `json:"id"`
	WorkerID       string    `json:"worker_id"`
	ClaimedAt      time.Time `json:"claimed_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// ProgressPercent is the task's last progress report's percent (nil:
	// none since its claim), ProgressMessage its message.
	ProgressPercent *float64 `json:"progress_percent"`
	ProgressMessage string   `json:"progress_message"`
}

// Queue returns one queue's detail (IsQueueNotFound when it holds no task
// and has no settings).
func (c *Client) Queue(ctx context.Context, name string) (*QueueDetail, error) {
	var out QueueDetail
	if _, err := c.do(ctx, call{method: http.MethodGet, path: queuePath(name), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// QueuePatch changes some of a queue's settings and leaves the others: a
// nil field stays as it is; a Clear field removes that limit.
type QueuePatch struct {
	Paused                  *bool
	MaxRunning              *int
	ClearMaxRunning         bool
	RateLimit               *RateLimit
	ClearRateLimit          bool
	MaxRunningPerGroup      *int
	ClearMaxRunningPerGroup bool
	// DefaultTimeoutSeconds (1-86400) applies to the attempts claimed
	// after the change.
	DefaultTimeoutSeconds      *int
	ClearDefaultTimeoutSeconds bool
	RateLimitPerGroup          *RateLimit
	ClearRateLimitPerGroup     bool
	// Limits replaces the named limits the queue draws on (each must
	// exist); ClearLimits removes them all.
	Limits      []string
	ClearLimits bool
	// Push turns push delivery on or changes it; ClearPush turns it off.
	Push      *PushPatch
	ClearPush bool
}

// QueueSettingsResult is a queue's settings after a change. When the
// change created or rotated a push queue's signing secret, Push.Secret
// holds it: this answer is the only time it is shown.
type QueueSettingsResult struct {
	Queue string `json:"queue"`
	QueueSettings
	UpdatedAt time.Time `json:"updated_at"`
}

// UpdateQueue changes a queue's settings (admin); a queue without tasks may
// have settings. Resuming a queue, or raising or clearing a limit, wakes the
// workers waiting for its tasks. A change of push settings is not sent
// again after a lost answer (the repeat would show no secret the first
// one created): rotate the secret instead.
func (c *Client) UpdateQueue(ctx context.Context, name string, p QueuePatch) (*QueueSettingsResult, error) {
	body := map[string]any{}
	if p.Paused != nil {
		body["paused"] = *p.Paused
	}
	setting := func(field string, v any, isSet, clear bool) error {
		switch {
		case isSet && clear:
			return errors.New("taskmaster: " + field + ": set or clear, not both")
		case isSet:
			body[field] = v
		case clear:
			body[field] = nil
		}
		return nil
	}
	if err := errors.Join(
		setting("max_running", p.MaxRunning, p.MaxRunning != nil, p.ClearMaxRunning),
		setting("rate_limit", p.RateLimit, p.RateLimit != nil, p.ClearRateLimit),
		setting("max_running_per_group", p.MaxRunningPerGroup, p.MaxRunningPerGroup != nil, p.ClearMaxRunningPerGroup),
		setting("default_timeout_seconds", p.DefaultTimeoutSeconds, p.DefaultTimeoutSeconds != nil, p.ClearDefaultTimeoutSeconds),
		setting("rate_limit_per_group", p.RateLimitPerGroup, p.RateLimitPerGroup != nil, p.ClearRateLimitPerGroup),
		setting("limits", p.Limits, p.Limits != nil, p.ClearLimits),
		setting("push", p.Push.request(), p.Push != nil, p.ClearPush),
	); err != nil {
		return nil, err
	}
	mode := retrySafe
	if p.Push != nil {
		mode = retryUnsent // a secret is in the first answer only
	}
	var out QueueSettingsResult
	if _, err := c.do(ctx, call{method: http.MethodPatch, path: queuePath(name), body: body, out: &out, mode: mode}); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseQueue pauses a queue: claims hand out none of its tasks until it is
// resumed.
func (c *Client) PauseQueue(ctx context.Context, name string) (*QueueSettingsResult, error) {
	paused := true
	return c.UpdateQueue(ctx, name, QueuePatch{Paused: &paused})
}

// ResumeQueue resumes a paused queue.
func (c *Client) ResumeQueue(ctx context.Context, name string) (*QueueSettingsResult, error) {
	paused := false
	return c.UpdateQueue(ctx, name, QueuePatch{Paused: &paused})
}

func queuePath(name string) string { return "/queues/v1/" + url.PathEscape(name) }
