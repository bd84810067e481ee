package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// ProblemScheduleNotFound (404): no schedule has this name.
const ProblemScheduleNotFound = ProblemTypePrefix + "schedule-not-found"

// ProblemScheduleExists (409): a schedule with this name exists already.
const ProblemScheduleExists = ProblemTypePrefix + "schedule-exists"

// ProblemUniqueKeyTaken (409): an operator's retry of a DEAD task whose
// unique key another unfinished task of its queue holds now.
const ProblemUniqueKeyTaken = ProblemTypePrefix + "unique-key-taken"

// ProblemWorkflowNotFound (404): no task (that the key may see) belongs to
// a run with this id.
const ProblemWorkflowNotFound = ProblemTypePrefix + "workflow-not-found"

// ProblemCancelRequested (409): a spawn by a task an operator asked to
// cancel.
const ProblemCancelRequested = ProblemTypePrefix + "cancel-requested"

// IsScheduleNotFound reports whether err is a 404 schedule-not-found.
func IsScheduleNotFound(err error) bool { return isType(err, ProblemScheduleNotFound) }

// IsScheduleExists reports whether err is a 409 schedule-exists.
func IsScheduleExists(err error) bool { return isType(err, ProblemScheduleExists) }

// Overlap says what a schedule's tick does while the previous tick's task is
// unfinished.
type Overlap string

// Overlaps.
const (
	// OverlapSkip creates nothing (the tick is counted in SkippedTicks).
	OverlapSkip Overlap = "skip"
	// OverlapAllow creates the tick's task anyway.
	OverlapAllow Overlap = "allow"
)

// ScheduleTask is the submission each tick of a schedule makes: a
// SubmitParams without RunAt, Deadline or IdempotencyKey (each tick's task
// is marked with the schedule and the tick instead: Task.ScheduleName,
// Task.ScheduleTick).
type ScheduleTask struct {
	Queue       string
	Payload     any
	Priority    int
	MaxAttempts int
	Tags        []string
	UniqueKey   string
	Retry       *Backoff
	// TimeoutSeconds limits each attempt of each tick's task (0: the
	// queue's default).
	TimeoutSeconds int
	// Metadata is each tick's task's metadata.
	Metadata map[string]string
}

// scheduleTaskJSON is a schedule's task as the API shows it.
type scheduleTaskJSON struct {
	Queue          string            `json:"queue"`
	Payload        json.RawMessage   `json:"payload"`
	Priority       int               `json:"priority"`
	MaxAttempts    int               `json:"max_attempts"`
	Tags           []string          `json:"tags"`
	UniqueKey      *string           `json:"unique_key"`
	Retry          *Backoff          `json:"retry"`
	TimeoutSeconds *int              `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata"`
}

// Schedule is the API's schedule object.
type Schedule struct {
	Name     string `json:"name"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	// Task is the submission of each tick (its Payload a json.RawMessage).
	Task    ScheduleTask `json:"-"`
	Overlap Overlap      `json:"overlap"`
	Paused  bool         `json:"paused"`
	// NextRunAt is the next tick (nil while paused).
	NextRunAt *time.Time `json:"next_run_at"`
	// LastTickAt is the last tick that ran or was skipped.
	LastTickAt *time.Time `json:"last_tick_at"`
	// LastTaskID is the task the last tick that ran created ("": none).
	LastTaskID string `json:"last_task_id"`
	// SkippedTicks counts due ticks that created no task.
	SkippedTicks int64     `json:"skipped_ticks"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// UnmarshalJSON reads a schedule as the API shows it.
func (s *Schedule) UnmarshalJSON(b []byte) error {
	type plain Schedule
	var in struct {
		plain
		LastTaskID *string          `json:"last_task_id"`
		Task       scheduleTaskJSON `json:"task"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*s = Schedule(in.plain)
	if in.LastTaskID != nil {
		s.LastTaskID = *in.LastTaskID
	}
	t := in.Task
	s.Task = ScheduleTask{Queue: t.Queue, Priority: t.Priority, MaxAttempts: t.MaxAttempts, Tags: t.Tags, Retry: t.Retry,
		Metadata: t.Metadata}
	if t.TimeoutSeconds != nil {
		s.Task.TimeoutSeconds = *t.TimeoutSeconds
	}
	if len(t.Payload) > 0 && string(t.Payload) != "null" {
		s.Task.Payload = t.Payload
	}
	if t.UniqueKey != nil {
		s.Task.UniqueKey = *t.UniqueKey
	}
	return nil
}

// MarshalJSON writes the schedule as the API shows it.
func (s Schedule) MarshalJSON() ([]byte, error) {
	type plain Schedule
	t, err := s.Task.request()
	if err != nil {
		return nil, err
	}
	return json.Marshal(struct {
		plain
		LastTaskID *string       `json:"last_task_id"`
		Task       submitRequest `json:"task"`
	}{plain: plain(s), LastTaskID: nullable(s.LastTaskID), Task: t})
}

func (t ScheduleTask) request() (submitRequest, error) {
	return SubmitParams{Queue: t.Queue, Payload: t.Payload, Priority: t.Priority, MaxAttempts: t.MaxAttempts,
		Tags: t.Tags, UniqueKey: t.UniqueKey, Retry: t.Retry, TimeoutSeconds: t.TimeoutSeconds, Metadata: t.Metadata}.request()
}

// ScheduleParams describe a new recurring schedule.
type ScheduleParams struct {
	// Name is 1-128 of [A-Za-z0-9._:-] (required).
	Name string
	// Cron is five fields ("0 9 * * MON-FRI"), a descriptor ("@daily") or
	// "@every <duration>" in whole seconds (required).
	Cron string
	// Timezone is the IANA zone Cron is read in ("": UTC).
	Timezone string
	// Task is what each tick submits (its Queue required).
	Task ScheduleTask
	// Overlap: OverlapSkip (the default) or OverlapAllow.
	Overlap Overlap
	// Paused creates the schedule paused.
	Paused bool
}

// CreateSchedule makes a recurring schedule (admin). Each due tick creates
// exactly one task; IsScheduleExists means the name is taken.
func (c *Client) CreateSchedule(ctx context.Context, p ScheduleParams) (*Schedule, error) {
	t, err := p.Task.request()
	if err != nil {
		return nil, fmt.Errorf("taskmaster: task: %w", err)
	}
	body := struct {
		Name     string        `json:"name"`
		Cron     string        `json:"cron"`
		Timezone string        `json:"timezone,omitempty"`
		Task     submitRequest `json:"task"`
		Overlap  Overlap       `json:"overlap,omitempty"`
		Paused   bool          `json:"paused,omitempty"`
	}{p.Name, p.Cron, p.Timezone, t, p.Overlap, p.Paused}
	var out Schedule
	// A repeat after a lost answer is a schedule-exists problem, never a
	// second schedule.
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/schedules/v1", body: body, out: &out, mode: retrySafe}); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedules lists the schedules the key may see, by name.
func (c *Client) Schedules(ctx context.Context) ([]Schedule, error) {
	var out struct {
		Schedules []Schedule `json:"schedules"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/schedules/v1", out: &out}); err != nil {
		return nil, err
	}
	return out.Schedules, nil
}

// Schedule returns one schedule.
func (c *Client) Schedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodGet, path: schedulePath(name), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// SchedulePatch changes a schedule; nil fields stay as they are.
type SchedulePatch struct {
	Cron     *string
	Timezone *string
	// Task replaces the schedule's task whole.
	Task    *ScheduleTask
	Overlap *Overlap
	Paused  *bool
}

// UpdateSchedule changes a schedule (admin). A new expression or zone, or a
// resumption, counts ticks afresh from now.
func (c *Client) UpdateSchedule(ctx context.Context, name string, p SchedulePatch) (*Schedule, error) {
	body := struct {
		Cron     *string        `json:"cron,omitempty"`
		Timezone *string        `json:"timezone,omitempty"`
		Task     *submitRequest `json:"task,omitempty"`
		Overlap  *Overlap       `json:"overlap,omitempty"`
		Paused   *bool          `json:"paused,omitempty"`
	}{Cron: p.Cron, Timezone: p.Timezone, Overlap: p.Overlap, Paused: p.Paused}
	if p.Task != nil {
		t, err := p.Task.request()
		if err != nil {
			return nil, fmt.Errorf("taskmaster: task: %w", err)
		}
		body.Task = &t
	}
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodPatch, path: schedulePath(name), body: body, out: &out, mode: retrySafe}); err != nil {
		return nil, err
	}
	return &out, nil
}

// PauseSchedule pauses a schedule: it ticks no more until resumed.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	paused := true
	return c.UpdateSchedule(ctx, name, SchedulePatch{Paused: &paused})
}

// ResumeSchedule resumes a paused schedule; ticks missed while paused are
// not run.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	paused := false
	return c.UpdateSchedule(ctx, name, SchedulePatch{Paused: &paused})
}

// DeleteSchedule deletes a schedule (admin) and returns it as it was; the
// tasks it created stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) (*Schedule, error) {
	var out Schedule
	if _, err := c.do(ctx, call{method: http.MethodDelete, path: schedulePath(name), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

func schedulePath(name string) string { return "/schedules/v1/" + url.PathEscape(name) }
