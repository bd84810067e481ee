// Package schedule holds recurring schedules: a cron expression in a time
// zone, the task each tick creates, and the rules of a tick (which tick is
// due, whether it runs or is skipped, when the next one comes). It is pure:
// the database's time comes in as an argument, and so does the parser of the
// cron expressions (ParseFunc), which an adapter provides.
package schedule

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

var (
	// ErrNotFound: no schedule has the given name.
	ErrNotFound = errors.New("schedule not found")
	// ErrExists: a schedule with the given name exists already.
	ErrExists = errors.New("schedule exists")
	// ErrNotDue: a tick was asked of a schedule that has none due (paused,
	// firing no more, or its next tick still to come).
	ErrNotDue = errors.New("schedule not due")
)

// Overlap says what a tick does while the previous tick's task is
// unfinished.
type Overlap string

const (
	// OverlapSkip creates nothing while the previous task is unfinished
	// (task.UnfinishedStatuses); the tick is counted as skipped.
	OverlapSkip Overlap = "skip"
	// OverlapAllow creates the tick's task whatever the previous one does.
	OverlapAllow Overlap = "allow"
)

// Valid reports whether o is one of the overlaps.
func (o Overlap) Valid() bool { return o == OverlapSkip || o == OverlapAllow }

// SkipReason says why a due tick created no task.
type SkipReason string

const (
	// SkipOverlap: the previous tick's task was unfinished and the
	// schedule's overlap is skip.
	SkipOverlap SkipReason = "overlap"
	// SkipUniqueKey: an unfinished task of the queue held the template's
	// unique key, so the submission returned it instead of a new task.
	SkipUniqueKey SkipReason = "unique_key"
)

// Spec is a parsed cron expression in its time zone: the times a schedule
// ticks.
type Spec interface {
	// Next returns the first tick strictly after t, or the zero time when
	// there is none.
	Next(t time.Time) time.Time
	// Period is the fixed interval of an "@every" expression, whose ticks
	// fall every Period from the first; 0 for calendar expressions.
	Period() time.Duration
}

// ParseFunc parses a cron expression for the time zone loc. Its error says,
// for the client, what is wrong with the expression.
type ParseFunc func(expr string, loc *time.Location) (Spec, error)

// Limits on schedules.
const (
	// MaxNameLength is the longest schedule name.
	MaxNameLength = 128
	// NameSet is the set of characters of a schedule name: names are URL
	// path segments and part of each tick's idempotency key.
	NameSet = "[A-Za-z0-9._:-]"
	// MaxCronLength is the longest cron expression accepted.
	MaxCronLength = 256
	// DefaultTimezone is the time zone of a schedule that names none.
	DefaultTimezone = "UTC"
)

var namePattern = regexp.MustCompile(`^` + NameSet + `{1,` + strconv.Itoa(MaxNameLength) + `}$`)

// ValidName reports whether name is a schedule name.
func ValidName(name string) bool { return namePattern.MatchString(name) }

// Snapshot is a schedule's full state as plain data.
type Snapshot struct {
	// Name identifies the schedule.
	Name string
	// Cron is the expression: five fields, a descriptor (@daily, ...) or
	// "@every <duration>".
	Cron string
	// Timezone is the IANA zone the expression is read in.
	Timezone string
	// Task is the submission each tick makes (its ID, RunAt, Deadline and
	// IdempotencyKey are unset: each tick fills in its own key).
	Task task.SubmitParams
	// Overlap says what a tick does while the previous task is unfinished.
	Overlap Overlap
	// Paused schedules tick no more until resumed.
	Paused bool
	// NextRunAt is the next tick; nil while paused, or when the expression
	// fires no more.
	NextRunAt *time.Time
	// LastTickAt is the last tick that ran or was skipped.
	LastTickAt *time.Time
	// LastTaskID is the task the last tick that ran created (uuid.Nil:
	// none yet).
	LastTaskID uuid.UUID
	// SkippedTicks counts the due ticks that created no task.
	SkippedTicks int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Schedule is a recurring schedule. Its methods are the only way to change
// it.
type Schedule struct {
	s Snapshot
}

// Restore rebuilds a schedule from stored state.
func Restore(s Snapshot) *Schedule {
	s.Task = cloneTemplate(s.Task)
	return &Schedule{s: s}
}

// Snapshot returns a copy of the schedule's state.
func (s *Schedule) Snapshot() Snapshot {
	out := s.s
	out.Task = cloneTemplate(s.s.Task)
	return out
}

// Name returns the schedule's name.
func (s *Schedule) Name() string { return s.s.Name }

// Queue returns the queue of the schedule's tasks.
func (s *Schedule) Queue() string { return s.s.Task.Queue }

// LastTaskID returns the task of the last tick that ran (uuid.Nil: none).
func (s *Schedule) LastTaskID() uuid.UUID { return s.s.LastTaskID }

// CreateParams describe a new schedule.
type CreateParams struct {
	Name string
	Cron string
	// Timezone is an IANA zone name; empty means DefaultTimezone.
	Timezone string
	// Task is the submission each tick makes; it must not set RunAt,
	// Deadline or IdempotencyKey.
	Task task.SubmitParams
	// Overlap; empty means OverlapSkip.
	Overlap Overlap
	Paused  bool
}

// Create makes a schedule at now. Every field is checked (a
// *validation.Error lists each offending one, the task's as "task.<field>");
// the first tick is the expression's first after now.
func Create(p CreateParams, parse ParseFunc, now time.Time) (*Schedule, error) {
	var v validation.Errors
	if !ValidName(p.Name) {
		v.Add("name", fmt.Sprintf("must be 1 to %d characters of %s", MaxNameLength, NameSet))
	}
	if p.Timezone == "" {
		p.Timezone = DefaultTimezone
	}
	if p.Overlap == "" {
		p.Overlap = OverlapSkip
	}
	spec := checkSpec(&v, p.Cron, p.Timezone, parse, now)
	checkTemplate(&v, &p.Task)
	checkOverlap(&v, p.Overlap)
	if err := v.Err(); err != nil {
		return nil, err
	}
	s := &Schedule{s: Snapshot{
		Name: p.Name, Cron: p.Cron, Timezone: p.Timezone, Task: cloneTemplate(p.Task),
		Overlap: p.Overlap, Paused: p.Paused, CreatedAt: now, UpdatedAt: now,
	}}
	if !p.Paused {
		s.s.NextRunAt = nextAfter(spec, now)
	}
	return s, nil
}

// PatchParams change a schedule; nil fields stay as they are.
type PatchParams struct {
	Cron     *string
	Timezone *string
	Task     *task.SubmitParams
	Overlap  *Overlap
	Paused   *bool
}

// Change says what a patch changed, for its audit events.
type Change struct {
	// Updated: the expression, time zone, task or overlap changed.
	Updated bool
	// Paused: the schedule was running and is paused now.
	Paused bool
	// Resumed: the schedule was paused and runs again.
	Resumed bool
}

// Patch changes the schedule at now. A new expression or time zone, or a
// resumption, counts ticks afresh from now: the next tick is the
// expression's first after now (ticks missed while paused are not run).
// Pausing clears the next tick. Fields are checked as by Create.
func (s *Schedule) Patch(p PatchParams, parse ParseFunc, now time.Time) (Change, error) {
	next := s.s
	var v validation.Errors
	var c Change
	if p.Cron != nil && *p.Cron != next.Cron {
		next.Cron, c.Updated = *p.Cron, true
	}
	if p.Timezone != nil && *p.Timezone != next.Timezone {
		next.Timezone, c.Updated = *p.Timezone, true
		if next.Timezone == "" {
			v.Add("timezone", "must be an IANA time zone name such as UTC or Europe/Paris")
		}
	}
	respec := c.Updated
	if p.Task != nil {
		tpl := cloneTemplate(*p.Task)
		checkTemplate(&v, &tpl)
		next.Task, c.Updated = tpl, true
	}
	if p.Overlap != nil && *p.Overlap != next.Overlap {
		checkOverlap(&v, *p.Overlap)
		next.Overlap, c.Updated = *p.Overlap, true
	}
	if p.Paused != nil && *p.Paused != next.Paused {
		next.Paused = *p.Paused
		c.Paused, c.Resumed = next.Paused, !next.Paused
	}
	spec := checkSpec(&v, next.Cron, next.Timezone, parse, now)
	if err := v.Err(); err != nil {
		return Change{}, err
	}
	switch {
	case next.Paused:
		next.NextRunAt = nil
	case respec || c.Resumed:
		next.NextRunAt = nextAfter(spec, now)
	}
	if c.Updated || c.Paused || c.Resumed {
		next.UpdatedAt = now
	}
	s.s = next
	return c, nil
}

// DueTick returns the tick to run at now: the latest tick at or before now,
// from NextRunAt on. Ticks missed while no scheduler ran (an outage) are
// collapsed into that one: only the latest runs. A paused schedule, one
// that fires no more, or one whose next tick is still to come has none
// (ErrNotDue).
func (s *Schedule) DueTick(parse ParseFunc, now time.Time) (time.Time, error) {
	if s.s.Paused || s.s.NextRunAt == nil || s.s.NextRunAt.After(now) {
		return time.Time{}, ErrNotDue
	}
	spec, err := s.spec(parse)
	if err != nil {
		return time.Time{}, err
	}
	return latestTick(spec, *s.s.NextRunAt, now), nil
}

// Overlaps reports whether a tick must be skipped because the previous
// tick's task, whose status is last ("" when there is none, or it was
// deleted), is unfinished and the schedule's overlap is skip.
func (s *Schedule) Overlaps(last task.Status) bool {
	return s.s.Overlap == OverlapSkip && s.s.LastTaskID != uuid.Nil && last.Unfinished()
}

// TickTask creates the task of tick, with id, at the database time now: the
// schedule's task, marked as the tick's (task.SubmitTick), so that storage
// finds it by the schedule's name and the tick, and nothing a producer
// sends can pass for it. However often a tick is tried, by however many
// instances, it has one task.
func (s *Schedule) TickTask(tick time.Time, id uuid.UUID, now time.Time) (*task.Task, event.Event, error) {
	p := cloneTemplate(s.s.Task)
	p.ID = id
	return task.SubmitTick(p, s.s.Name, tick, now)
}

// Ran records that tick ran and created (or found, by its mark) the task
// taskID at now, and moves NextRunAt to the first tick after it.
func (s *Schedule) Ran(tick time.Time, taskID uuid.UUID, parse ParseFunc, now time.Time) error {
	if err := s.advance(tick, parse, now); err != nil {
		return err
	}
	s.s.LastTaskID = taskID
	return nil
}

// Skip records that tick created no task, for reason, and moves NextRunAt
// to the first tick after it. It returns the schedule.tick_skipped event.
func (s *Schedule) Skip(tick time.Time, reason SkipReason, parse ParseFunc, now time.Time) (event.Event, error) {
	if err := s.advance(tick, parse, now); err != nil {
		return event.Event{}, err
	}
	s.s.SkippedTicks++
	return event.Event{
		Version: event.Version, Type: event.ScheduleTickSkipped, Schedule: s.s.Name, Queue: s.s.Task.Queue,
		Reason: string(reason), OccurredAt: now,
	}, nil
}

// advance moves past tick, which must be the due one.
func (s *Schedule) advance(tick time.Time, parse ParseFunc, now time.Time) error {
	due, err := s.DueTick(parse, now)
	if err != nil {
		return err
	}
	if !due.Equal(tick) {
		return fmt.Errorf("schedule %s: tick %s is not the due one (%s): %w", s.s.Name, tick, due, ErrNotDue)
	}
	spec, err := s.spec(parse)
	if err != nil {
		return err
	}
	s.s.LastTickAt = &tick
	s.s.NextRunAt = nextAfter(spec, tick)
	s.s.UpdatedAt = now
	return nil
}

// spec parses the stored expression.
func (s *Schedule) spec(parse ParseFunc) (Spec, error) {
	loc, err := time.LoadLocation(s.s.Timezone)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: time zone %q: %w", s.s.Name, s.s.Timezone, err)
	}
	spec, err := parse(s.s.Cron, loc)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: cron %q: %w", s.s.Name, s.s.Cron, err)
	}
	return spec, nil
}

// checkSpec adds to v what is wrong with the expression or the zone, and
// returns the parsed expression when both are fine.
func checkSpec(v *validation.Errors, expr, zone string, parse ParseFunc, now time.Time) Spec {
	var loc *time.Location
	if zone != "" {
		l, err := time.LoadLocation(zone)
		if err != nil || zone == "Local" {
			v.Add("timezone", "must be an IANA time zone name such as UTC or Europe/Paris")
		} else {
			loc = l
		}
	}
	var spec Spec
	switch {
	case expr == "":
		v.Add("cron", "is required")
	case len(expr) > MaxCronLength:
		v.Add("cron", fmt.Sprintf("must be at most %d bytes", MaxCronLength))
	default:
		s, err := parse(expr, time.UTC)
		if err != nil {
			v.Add("cron", err.Error())
		} else {
			spec = s
		}
	}
	if spec == nil || loc == nil {
		return nil
	}
	spec, err := parse(expr, loc)
	if err != nil {
		v.Add("cron", err.Error())
		return nil
	}
	if spec.Next(now).IsZero() {
		v.Add("cron", "never fires")
		return nil
	}
	return spec
}

// checkTemplate checks a schedule's task like a submission, with its fields
// under "task.", and fills its defaults. A tick's task runs at once and is
// found by its tick, so run_at, deadline and idempotency_key are refused.
func checkTemplate(v *validation.Errors, p *task.SubmitParams) {
	if p.RunAt != nil {
		v.Add("task.run_at", "is not accepted in a schedule's task: each tick's task is claimable at once")
	}
	if p.Deadline != nil {
		v.Add("task.deadline", "is not accepted in a schedule's task")
	}
	if p.IdempotencyKey != "" {
		v.Add("task.idempotency_key", "is not accepted in a schedule's task: each tick's task is marked with its schedule and tick instead")
	}
	if p.Trace != (task.Trace{}) {
		v.Add("task.traceparent", "is not accepted in a schedule's task: each tick's task starts a trace of its own")
	}
	if err := task.ValidateSubmit(p); err != nil {
		var ve *validation.Error
		if errors.As(err, &ve) {
			v.Merge("task.", ve)
		}
	}
}

func checkOverlap(v *validation.Errors, o Overlap) {
	if !o.Valid() {
		v.Add("overlap", `must be "skip" or "allow"`)
	}
}

// nextAfter is the first tick after t, or nil when there is none.
func nextAfter(spec Spec, t time.Time) *time.Time {
	var n time.Time
	if p := spec.Period(); p > 0 {
		n = t.Truncate(time.Second).Add(p) // periods are whole seconds: so are the ticks
	} else {
		n = spec.Next(t)
	}
	if n.IsZero() {
		return nil
	}
	n = n.UTC()
	return &n
}

// latestTick returns the latest tick at or before now, given due, a tick
// at or before now. An "@every" expression ticks every period from due on.
// A calendar expression is searched backwards from now in doubling windows,
// so a long outage costs a few steps, not one per missed tick.
func latestTick(spec Spec, due, now time.Time) time.Time {
	if p := spec.Period(); p > 0 {
		return due.Add(now.Sub(due) / p * p)
	}
	latestIn := func(first time.Time) time.Time {
		t := first
		for {
			n := spec.Next(t)
			if n.IsZero() || n.After(now) {
				return t
			}
			t = n
		}
	}
	for w := time.Second; ; w *= 2 {
		from := now.Add(-w)
		if !from.After(due) {
			return latestIn(due)
		}
		if first := spec.Next(from); !first.IsZero() && !first.After(now) {
			return latestIn(first)
		}
	}
}

// cloneTemplate copies a submission so that no caller shares its slices
// or pointers.
func cloneTemplate(p task.SubmitParams) task.SubmitParams {
	p.Tags = slices.Clone(p.Tags)
	p.Payload = slices.Clone(p.Payload)
	if p.MaxAttempts != nil {
		n := *p.MaxAttempts
		p.MaxAttempts = &n
	}
	if p.UniqueKey != nil {
		k := *p.UniqueKey
		p.UniqueKey = &k
	}
	if p.Retry != nil {
		r := *p.Retry
		p.Retry = &r
	}
	if p.TimeoutSeconds != nil {
		n := *p.TimeoutSeconds
		p.TimeoutSeconds = &n
	}
	p.Metadata = maps.Clone(p.Metadata)
	return p
}
