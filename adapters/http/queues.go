package http

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/mux"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// QueueJSON is one queue's statistics and settings.
type QueueJSON struct {
	Queue                   string              `json:"queue"`
	Pending                 int64               `json:"pending"`
	Running                 int64               `json:"running"`
	Done                    int64               `json:"done"`
	Dead                    int64               `json:"dead"`
	Blocked                 int64               `json:"blocked"`
	ActiveWorkers           int64               `json:"active_workers"`
	OldestPendingAgeSeconds *float64            `json:"oldest_pending_age_seconds"`
	Rates                   map[string]RateJSON `json:"rates"`
	Totals                  QueueTotalsJSON     `json:"totals"`
	StatsAsOf               *time.Time          `json:"stats_as_of"`
	// Paused is Settings.Paused, at the top for filters and dashboards.
	Paused   bool              `json:"paused"`
	Settings QueueSettingsJSON `json:"settings"`
}

// RateJSON is a queue's throughput over one window, per minute.
type RateJSON struct {
	Enqueued     float64 `json:"enqueued"`
	Claimed      float64 `json:"claimed"`
	Completed    float64 `json:"completed"`
	DeadLettered float64 `json:"dead_lettered"`
}

// QueueTotalsJSON are a queue's cumulative transition counts.
type QueueTotalsJSON struct {
	Submitted    int64            `json:"submitted"`
	Claimed      int64            `json:"claimed"`
	Completed    int64            `json:"completed"`
	Failed       int64            `json:"failed"`
	DeadLettered map[string]int64 `json:"dead_lettered"`
	Requeued     map[string]int64 `json:"requeued"`
	Cleaned      int64            `json:"cleaned"`
}

// QueueSettingsJSON are a queue's settings; a null limit is no limit.
type QueueSettingsJSON struct {
	Paused             bool           `json:"paused"`
	MaxRunning         *int           `json:"max_running"`
	RateLimit          *RateLimitJSON `json:"rate_limit"`
	MaxRunningPerGroup *int           `json:"max_running_per_group"`
	// DefaultTimeoutSeconds is the time limit of the attempts of the
	// queue's tasks that have none of their own (null: none).
	DefaultTimeoutSeconds *int           `json:"default_timeout_seconds"`
	RateLimitPerGroup     *RateLimitJSON `json:"rate_limit_per_group"`
	// Limits are the named limits the queue draws on.
	Limits []string `json:"limits"`
	// Push is the queue's push delivery (null: workers claim its tasks).
	Push *PushJSON `json:"push"`
}

// PushJSON is a push queue's delivery. Secrets are never shown: the
// static headers by name only, the signing secret once, in the answer of
// the change that created or rotated it (Secret).
type PushJSON struct {
	URL                     string     `json:"url"`
	TimeoutSeconds          int        `json:"timeout_seconds"`
	MaxInFlight             int        `json:"max_in_flight"`
	HeaderNames             []string   `json:"header_names"`
	NonRetryableStatuses    []int      `json:"non_retryable_statuses"`
	SecretRotatedAt         time.Time  `json:"secret_rotated_at"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	// Secret is the new signing secret, in a PATCH answer that created or
	// rotated it only.
	Secret string `json:"secret,omitempty"`
}

// DeliveriesJSON summarizes a push queue's recent deliveries, as the
// dispatchers of every instance reported them in the last minute.
type DeliveriesJSON struct {
	InFlight int `json:"in_flight"`
	// Recent is how many recent deliveries are summed up.
	Recent int `json:"recent"`
	// Statuses counts them by response status ("none": no response).
	Statuses map[string]int `json:"statuses"`
	// LastStatus is the latest reported delivery's status (null: none, or
	// no response).
	LastStatus *int `json:"last_status"`
	// LatencyMillis are the latency percentiles p50 and p99.
	LatencyMillis map[string]float64 `json:"latency_ms"`
	AsOf          time.Time          `json:"as_of"`
}

// RateLimitJSON is a queue's claim rate limit: a token bucket refilled at
// per_second tokens a second that holds at most burst.
type RateLimitJSON struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// QueueDetailJSON is GET /queues/v1/{queue}: the queue's statistics, its
// RUNNING tasks (counted now) and its average durations.
type QueueDetailJSON struct {
	QueueJSON
	Leased       int64            `json:"leased"`
	LeasedSample []LeasedTaskJSON `json:"leased_sample"`
	// AvgExecutionSeconds and AvgQueueWaitSeconds are keyed last_5m and
	// last_15m; null when no event of the window carried the duration.
	AvgExecutionSeconds map[string]*float64 `json:"avg_execution_seconds"`
	AvgQueueWaitSeconds map[string]*float64 `json:"avg_queue_wait_seconds"`
	// Deliveries are a push queue's recent deliveries (null: no push
	// delivery, or none reported in the last minute).
	Deliveries *DeliveriesJSON `json:"deliveries"`
}

// LeasedTaskJSON is one RUNNING task of a queue.
type LeasedTaskJSON struct {
	ID             string    `json:"id"`
	WorkerID       string    `json:"worker_id"`
	ClaimedAt      time.Time `json:"claimed_at"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// ProgressPercent and ProgressMessage are the task's last progress
	// report's (null: none since its claim).
	ProgressPercent *float64 `json:"progress_percent"`
	ProgressMessage *string  `json:"progress_message"`
}

// QueueSettingsResponse answers PATCH /queues/v1/{queue}.
type QueueSettingsResponse struct {
	Queue string `json:"queue"`
	QueueSettingsJSON
	UpdatedAt time.Time `json:"updated_at"`
}

func settingsJSON(s queue.Settings) QueueSettingsJSON {
	out := QueueSettingsJSON{Paused: s.Paused, MaxRunning: s.MaxRunning, MaxRunningPerGroup: s.MaxRunningPerGroup,
		RateLimit: rateLimitJSON(s.RateLimit), RateLimitPerGroup: rateLimitJSON(s.RateLimitPerGroup),
		Limits: append([]string{}, s.Limits...), DefaultTimeoutSeconds: s.DefaultTimeoutSeconds}
	if p := s.Push; p != nil {
		out.Push = &PushJSON{URL: p.URL, TimeoutSeconds: p.TimeoutSeconds, MaxInFlight: p.MaxInFlight,
			HeaderNames: append([]string{}, p.HeaderNames...), NonRetryableStatuses: append([]int{}, p.NonRetryableStatuses...),
			SecretRotatedAt: p.SecretRotatedAt.UTC(), PreviousSecretExpiresAt: optTime(p.PreviousSecretExpiresAt)}
	}
	return out
}

func rateLimitJSON(r *queue.RateLimit) *RateLimitJSON {
	if r == nil {
		return nil
	}
	return &RateLimitJSON{PerSecond: r.PerSecond, Burst: r.Burst}
}

func deliveriesJSON(d *ports.DeliverySummary) *DeliveriesJSON {
	if d == nil {
		return nil
	}
	out := &DeliveriesJSON{InFlight: d.InFlight, Recent: d.Count, Statuses: map[string]int{}, AsOf: d.AsOf.UTC(),
		LatencyMillis: map[string]float64{
			"p50": float64(d.LatencyP50.Microseconds()) / 1000, "p99": float64(d.LatencyP99.Microseconds()) / 1000,
		}}
	for status, n := range d.Statuses {
		key := "none"
		if status != 0 {
			key = strconv.Itoa(status)
		}
		out.Statuses[key] += n
	}
	if d.Count > 0 && d.LastStatus != 0 {
		last := d.LastStatus
		out.LastStatus = &last
	}
	return out
}

func windowKey(w time.Duration) string { return fmt.Sprintf("last_%dm", int(w/time.Minute)) }

func queueJSON(q ports.QueueStats) QueueJSON {
	out := QueueJSON{
		Queue: q.Queue, Pending: q.Pending, Running: q.Running, Done: q.Done, Dead: q.Dead, Blocked: q.Blocked,
		ActiveWorkers: q.ActiveWorkers,
		Rates:         make(map[string]RateJSON, len(q.Rates)),
		Totals: QueueTotalsJSON{
			Submitted: q.Totals.Submitted, Claimed: q.Totals.Claimed, Completed: q.Totals.Completed,
			Failed: q.Totals.Failed, Cleaned: q.Totals.Cleaned,
			DeadLettered: nonNilMap(q.Totals.DeadLettered), Requeued: nonNilMap(q.Totals.Requeued),
		},
		StatsAsOf: optTime(q.StatsAsOf),
		Paused:    q.Settings.Paused,
		Settings:  settingsJSON(q.Settings),
	}
	if q.OldestPendingAge != nil {
		age := q.OldestPendingAge.Seconds()
		out.OldestPendingAgeSeconds = &age
	}
	for _, r := range q.Rates {
		out.Rates[windowKey(r.Window)] = RateJSON{
			Enqueued: r.Enqueued, Claimed: r.Claimed, Completed: r.Completed, DeadLettered: r.DeadLettered,
		}
	}
	return out
}

func queueDetailJSON(d *ports.QueueDetail) QueueDetailJSON {
	out := QueueDetailJSON{
		QueueJSON: queueJSON(d.QueueStats), Leased: d.Leased, LeasedSample: make([]LeasedTaskJSON, len(d.LeasedSample)),
		AvgExecutionSeconds: map[string]*float64{}, AvgQueueWaitSeconds: map[string]*float64{},
		Deliveries: deliveriesJSON(d.Deliveries),
	}
	for i, t := range d.LeasedSample {
		out.LeasedSample[i] = LeasedTaskJSON{ID: t.ID.String(), WorkerID: t.WorkerID, ClaimedAt: t.ClaimedAt.UTC(), LeaseExpiresAt: t.LeaseExpiresAt.UTC(),
			ProgressPercent: t.ProgressPercent}
		if t.ProgressPercent != nil {
			m := t.ProgressMessage
			out.LeasedSample[i].ProgressMessage = &m
		}
	}
	for _, a := range d.Averages {
		out.AvgExecutionSeconds[windowKey(a.Window)] = a.ExecutionSeconds
		out.AvgQueueWaitSeconds[windowKey(a.Window)] = a.QueueWaitSeconds
	}
	return out
}

type queuesResponse struct {
	Queues []QueueJSON `json:"queues"`
	// NextCursor continues the listing (null on the last page).
	NextCursor *string `json:"next_cursor"`
}

func (s *Server) handleListQueues(w http.ResponseWriter, r *http.Request) {
	q, err := queueQueryOf(r.URL.Query())
	if err != nil {
		writeError(w, r, err)
		return
	}
	page, err := s.reads.Queues.Queues(r.Context(), q)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := queuesResponse{Queues: make([]QueueJSON, len(page.Queues))}
	for i, q := range page.Queues {
		out.Queues[i] = queueJSON(q)
	}
	if n := len(page.Queues); page.More && n > 0 {
		c := base64.RawURLEncoding.EncodeToString([]byte(page.Queues[n-1].Queue))
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
}

// queueQueryOf reads the queue listing's query parameters; an empty
// parameter is the same as an absent one.
func queueQueryOf(values url.Values) (ports.QueueQuery, error) {
	q := ports.QueueQuery{Prefix: values.Get("prefix"), Pattern: values.Get("pattern")}
	var v validation.Errors
	if raw := values.Get("min_pending"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			v.Add("min_pending", "must be an integer, 0 or more")
		}
		q.MinPending = &n
	}
	if raw := values.Get("paused"); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			v.Add("paused", "must be true or false")
		}
		q.Paused = &b
	}
	q.Limit = pageLimitOf(values, &v)
	if after := pageCursorOf(values, &v, decodeQueueCursor); after != nil {
		q.After = *after
	}
	return q, v.Err()
}

func (s *Server) handleGetQueue(w http.ResponseWriter, r *http.Request) {
	d, err := s.reads.Queues.Queue(r.Context(), mux.Vars(r)["queue"])
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, queueDetailJSON(d))
}

// patchQueueRequest keeps each field raw: an absent field leaves its
// setting, a null clears it.
type patchQueueRequest struct {
	Paused             json.RawMessage `json:"paused"`
	MaxRunning         json.RawMessage `json:"max_running"`
	RateLimit          json.RawMessage `json:"rate_limit"`
	MaxRunningPerGroup json.RawMessage `json:"max_running_per_group"`
	// DefaultTimeoutSeconds: seconds, or null to clear.
	DefaultTimeoutSeconds json.RawMessage `json:"default_timeout_seconds"`
	RateLimitPerGroup     json.RawMessage `json:"rate_limit_per_group"`
	Limits                json.RawMessage `json:"limits"`
	Push                  json.RawMessage `json:"push"`
}

// pushRequest is the push object of a PATCH: an absent field keeps what
// the queue has (or its default when push is turned on).
type pushRequest struct {
	URL                  json.RawMessage `json:"url"`
	TimeoutSeconds       json.RawMessage `json:"timeout_seconds"`
	MaxInFlight          json.RawMessage `json:"max_in_flight"`
	Headers              json.RawMessage `json:"headers"`
	NonRetryableStatuses json.RawMessage `json:"non_retryable_statuses"`
	RotateSecret         json.RawMessage `json:"rotate_secret"`
	SecretOverlapSeconds json.RawMessage `json:"secret_overlap_seconds"`
}

type rateLimitRequest struct {
	PerSecond *float64 `json:"per_second"`
	Burst     *int     `json:"burst"`
}

// patch reads the request into a queue.Patch. A value of the wrong type is
// a 422 naming its field, like a value out of range (queue.Patch.Validate).
func (req patchQueueRequest) patch() (queue.Patch, error) {
	var p queue.Patch
	var v validation.Errors
	isNull := func(raw json.RawMessage) bool { return string(raw) == "null" }
	if req.Paused != nil {
		var b bool
		if isNull(req.Paused) || json.Unmarshal(req.Paused, &b) != nil {
			v.Add("paused", "must be true or false")
		}
		p.Paused = &b
	}
	integer := func(field string, raw json.RawMessage, most int) queue.Optional[int] {
		o := queue.Optional[int]{Set: raw != nil}
		if raw == nil || isNull(raw) {
			return o
		}
		var n int
		if err := json.Unmarshal(raw, &n); err != nil {
			v.Add(field, fmt.Sprintf("must be null or an integer from 1 to %d", most))
		}
		o.Value = &n
		return o
	}
	p.MaxRunning = integer("max_running", req.MaxRunning, queue.MaxLimit)
	p.MaxRunningPerGroup = integer("max_running_per_group", req.MaxRunningPerGroup, queue.MaxLimit)
	p.DefaultTimeoutSeconds = integer("default_timeout_seconds", req.DefaultTimeoutSeconds, queue.MaxDefaultTimeoutSeconds)
	rate := func(field string, raw json.RawMessage) queue.Optional[queue.RateLimit] {
		o := queue.Optional[queue.RateLimit]{Set: raw != nil}
		if raw != nil && !isNull(raw) {
			if rl, ok := rateLimitOf(field, raw, &v); ok {
				o.Value = &rl
			}
		}
		return o
	}
	p.RateLimit = rate("rate_limit", req.RateLimit)
	p.RateLimitPerGroup = rate("rate_limit_per_group", req.RateLimitPerGroup)
	if raw := req.Limits; raw != nil {
		p.Limits.Set = true
		if !isNull(raw) {
			var names []string
			if err := json.Unmarshal(raw, &names); err != nil {
				v.Add("limits", "must be null or an array of limit names")
			}
			p.Limits.Value = &names
		}
	}
	if raw := req.Push; raw != nil {
		p.Push.Set = true
		if !isNull(raw) {
			if pp, ok := pushOf(raw, &v); ok {
				p.Push.Value = &pp
			}
		}
	}
	if err := v.Err(); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// rateLimitOf reads a rate limit object (field names it); burst defaults
// to one second's tokens (per_second rounded up, at least 1).
func rateLimitOf(field string, raw json.RawMessage, v *validation.Errors) (queue.RateLimit, bool) {
	var req rateLimitRequest
	if err := decodeStrict(raw, &req); err != nil {
		v.Add(field, `must be null or an object {"per_second": number, "burst": integer}`)
		return queue.RateLimit{}, false
	}
	if req.PerSecond == nil {
		v.Add(field+".per_second", "is required")
		return queue.RateLimit{}, false
	}
	rl := queue.RateLimit{PerSecond: *req.PerSecond, Burst: queue.DefaultBurst(*req.PerSecond)}
	if req.Burst != nil {
		rl.Burst = *req.Burst
	}
	return rl, true
}

// decodeStrict decodes raw into dst, refusing unknown fields.
func decodeStrict(raw json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

// pushOf reads a push object into a queue.PushPatch; a value of the wrong
// type is a 422 naming its field.
func pushOf(raw json.RawMessage, v *validation.Errors) (queue.PushPatch, bool) {
	var req pushRequest
	if err := decodeStrict(raw, &req); err != nil {
		v.Add("push", "must be null or an object with url, timeout_seconds, max_in_flight, headers, "+
			"non_retryable_statuses, rotate_secret, secret_overlap_seconds")
		return queue.PushPatch{}, false
	}
	var p queue.PushPatch
	notNull := func(field string, raw json.RawMessage, dst any, want string) bool {
		if raw == nil {
			return false
		}
		if string(raw) == "null" || json.Unmarshal(raw, dst) != nil {
			v.Add(field, "must be "+want)
			return false
		}
		return true
	}
	var u string
	if notNull("push.url", req.URL, &u, "a URL") {
		p.URL = &u
	}
	var timeout, inFlight, overlap int
	if notNull("push.timeout_seconds", req.TimeoutSeconds, &timeout, "an integer") {
		p.TimeoutSeconds = &timeout
	}
	if notNull("push.max_in_flight", req.MaxInFlight, &inFlight, "an integer") {
		p.MaxInFlight = &inFlight
	}
	if notNull("push.secret_overlap_seconds", req.SecretOverlapSeconds, &overlap, "an integer") {
		p.SecretOverlapSeconds = &overlap
	}
	notNull("push.rotate_secret", req.RotateSecret, &p.RotateSecret, "true or false")
	if raw := req.Headers; raw != nil {
		p.Headers.Set = true
		if string(raw) != "null" {
			var h map[string]string
			if err := json.Unmarshal(raw, &h); err != nil {
				v.Add("push.headers", "must be null or an object of header names to string values")
			}
			p.Headers.Value = &h
		}
	}
	if raw := req.NonRetryableStatuses; raw != nil {
		p.NonRetryableStatuses.Set = true
		if string(raw) != "null" {
			var codes []int
			if err := json.Unmarshal(raw, &codes); err != nil {
				v.Add("push.non_retryable_statuses", "must be null (the default) or an array of HTTP statuses")
			}
			p.NonRetryableStatuses.Value = &codes
		}
	}
	return p, true
}

func (s *Server) handlePatchQueue(w http.ResponseWriter, r *http.Request) {
	var req patchQueueRequest
	if err := decode(r, &req, false); err != nil {
		writeError(w, r, err)
		return
	}
	p, err := req.patch()
	if err != nil {
		writeError(w, r, err)
		return
	}
	out, err := s.queues.UpdateSettings(r.Context(), mux.Vars(r)["queue"], p)
	if err != nil {
		writeError(w, r, err)
		return
	}
	resp := QueueSettingsResponse{Queue: out.Queue, QueueSettingsJSON: settingsJSON(out.Settings), UpdatedAt: out.UpdatedAt.UTC()}
	if out.NewSecret != "" && resp.Push != nil {
		resp.Push.Secret = out.NewSecret
		w.Header().Set("Cache-Control", "no-store") // the secret is shown once
	}
	writeJSON(w, http.StatusOK, resp)
}

// decodeQueueCursor is the queue name a listing's cursor holds.
func decodeQueueCursor(s string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil && len(b) == 0 {
		err = errors.New("an empty cursor")
	}
	return string(b), err
}
