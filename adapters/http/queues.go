package http

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
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
	DefaultTimeoutSeconds *int `json:"default_timeout_seconds"`
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
		DefaultTimeoutSeconds: s.DefaultTimeoutSeconds}
	if r := s.RateLimit; r != nil {
		out.RateLimit = &RateLimitJSON{PerSecond: r.PerSecond, Burst: r.Burst}
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
	page, err := s.queues.Queues(r.Context(), q)
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
	if raw := values.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil {
			v.Add("limit", "must be an integer")
		}
		q.Limit = &n
	}
	if raw := values.Get("cursor"); raw != "" {
		after, err := base64.RawURLEncoding.DecodeString(raw)
		if err != nil || len(after) == 0 {
			v.Add("cursor", "is not a cursor this API returned")
		}
		q.After = string(after)
	}
	return q, v.Err()
}

func (s *Server) handleGetQueue(w http.ResponseWriter, r *http.Request) {
	d, err := s.queues.Queue(r.Context(), mux.Vars(r)["queue"])
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
	if raw := req.RateLimit; raw != nil {
		p.RateLimit.Set = true
		if !isNull(raw) {
			rl, ok := rateLimitOf(raw, &v)
			if ok {
				p.RateLimit.Value = &rl
			}
		}
	}
	if err := v.Err(); err != nil {
		return p, err
	}
	return p, p.Validate()
}

// rateLimitOf reads a rate_limit object; burst defaults to one second's
// tokens (per_second rounded up, at least 1).
func rateLimitOf(raw json.RawMessage, v *validation.Errors) (queue.RateLimit, bool) {
	var req rateLimitRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		v.Add("rate_limit", `must be null or an object {"per_second": number, "burst": integer}`)
		return queue.RateLimit{}, false
	}
	if req.PerSecond == nil {
		v.Add("rate_limit.per_second", "is required")
		return queue.RateLimit{}, false
	}
	rl := queue.RateLimit{PerSecond: *req.PerSecond}
	if req.Burst != nil {
		rl.Burst = *req.Burst
	} else {
		rl.Burst = int(max(1, math.Min(math.Ceil(rl.PerSecond), queue.MaxLimit)))
	}
	return rl, true
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
	writeJSON(w, http.StatusOK, QueueSettingsResponse{Queue: out.Queue, QueueSettingsJSON: settingsJSON(out.Settings), UpdatedAt: out.UpdatedAt.UTC()})
}
