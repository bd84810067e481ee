// Package worker is worker liveness: a worker is ACTIVE while it gives signs
// of life, STALE after a short silence, DEAD after a long one. Like the task
// package it is pure; time comes in as an argument.
package worker

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Status is a worker's liveness.
type Status string

const (
	// StatusActive is entered on registration and on any sign of life
	// (heartbeat, claim, complete, fail) from a STALE worker. It is left for
	// STALE or DEAD when the worker falls silent.
	StatusActive Status = "ACTIVE"
	// StatusStale is entered after StaleAfter of silence. A STALE worker may
	// still claim. It is left for ACTIVE on a sign of life, or DEAD.
	StatusStale Status = "STALE"
	// StatusDead is entered after DeadAfter of silence; the tasks the worker
	// held are taken back. It is left only by re-registering (ACTIVE).
	StatusDead Status = "DEAD"
)

var (
	// ErrNotFound: no worker has the given id.
	ErrNotFound = errors.New("worker not found")
	// ErrDead: the worker was declared dead and must register again.
	ErrDead = errors.New("worker is dead and must register again")
)

// Limits on registration values.
const (
	// MaxIDLength is the longest worker id.
	MaxIDLength = 128
	// MaxQueues is the most queues a worker may serve.
	MaxQueues = 64
	// MaxTags is the most tags a worker may carry.
	MaxTags = 64
	// MaxTagLength is the longest tag, in characters. Queue names follow
	// the tasks' rule (task.ValidQueue).
	MaxTagLength = 128
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// LivenessConfig holds the silence thresholds.
type LivenessConfig struct {
	// StaleAfter is the silence after which an ACTIVE worker is STALE.
	StaleAfter time.Duration
	// DeadAfter is the silence after which a worker is DEAD.
	DeadAfter time.Duration
}

// DefaultLivenessConfig: STALE after 30 s, DEAD after 120 s.
func DefaultLivenessConfig() LivenessConfig {
	return LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}
}

// Validate reports whether the thresholds make sense.
func (c LivenessConfig) Validate() error {
	if c.StaleAfter <= 0 {
		return errors.New("stale threshold must be positive")
	}
	if c.DeadAfter <= c.StaleAfter {
		return errors.New("dead threshold must be greater than the stale threshold")
	}
	return nil
}

// HeartbeatInterval is how often workers are asked to beat: a third of the
// stale threshold, so two lost beats do not make a worker STALE.
func (c LivenessConfig) HeartbeatInterval() time.Duration { return c.StaleAfter / 3 }

// Liveness returns the status that lastHeartbeat implies at now.
func (c LivenessConfig) Liveness(lastHeartbeat, now time.Time) Status {
	silence := now.Sub(lastHeartbeat)
	switch {
	case silence >= c.DeadAfter:
		return StatusDead
	case silence >= c.StaleAfter:
		return StatusStale
	default:
		return StatusActive
	}
}

// Snapshot is a worker's state as plain data.
type Snapshot struct {
	ID              string
	Queues          []string
	Tags            []string
	Status          Status
	RegisteredAt    time.Time
	LastHeartbeatAt time.Time
	// Draining is set when an operator asked the worker to stop claiming;
	// registering again clears it.
	Draining bool
	// Owner is the API key that registered the worker (its id as text), ""
	// for a worker registered while authentication was off. Only its owner
	// (or an admin) may act as the worker (domain/apikey).
	Owner string
}

// Worker is a registered worker process.
type Worker struct {
	s Snapshot
}

// Restore rebuilds a worker from stored state.
func Restore(s Snapshot) *Worker {
	s.Queues = slices.Clone(s.Queues)
	s.Tags = slices.Clone(s.Tags)
	return &Worker{s: s}
}

// Snapshot returns a copy of the worker's state.
func (w *Worker) Snapshot() Snapshot {
	s := w.s
	s.Queues = slices.Clone(w.s.Queues)
	s.Tags = slices.Clone(w.s.Tags)
	return s
}

// ID returns the worker id.
func (w *Worker) ID() string { return w.s.ID }

// Status returns the worker's liveness status.
func (w *Worker) Status() Status { return w.s.Status }

// Queues returns the queues the worker serves (empty: any queue).
func (w *Worker) Queues() []string { return slices.Clone(w.s.Queues) }

// Tags returns the worker's capability tags.
func (w *Worker) Tags() []string { return slices.Clone(w.s.Tags) }

// Owner returns the API key that owns the worker ("" for none).
func (w *Worker) Owner() string { return w.s.Owner }

// RegisterParams describe a registration.
type RegisterParams struct {
	ID     string
	Queues []string
	Tags   []string
	// Owner is the registering API key ("" when authentication is off).
	Owner string
}

// ValidateRegister checks a registration and de-duplicates its lists.
func ValidateRegister(p *RegisterParams) error {
	var v validation.Errors
	if !idPattern.MatchString(p.ID) {
		v.Add("id", fmt.Sprintf("must be 1 to %d characters of [A-Za-z0-9._:-]", MaxIDLength))
	}
	p.Queues = queues(&v, p.Queues)
	printable(&v, "tags", p.Tags)
	p.Tags = dedupe(&v, "tags", p.Tags, MaxTags)
	return v.Err()
}

// queues checks the queue names (task.ValidQueue) and de-duplicates them.
func queues(v *validation.Errors, in []string) []string {
	if len(in) > MaxQueues {
		v.Add("queues", fmt.Sprintf("must have at most %d entries", MaxQueues))
	}
	out := make([]string, 0, len(in))
	for i, q := range in {
		if !task.ValidQueue(q) {
			task.CheckQueue(v, fmt.Sprintf("queues[%d]", i), q)
			continue
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// printable reports entries holding control characters, which task tags
// may not hold either (no task could ever match them, and storage cannot
// keep a NUL).
func printable(v *validation.Errors, field string, in []string) {
	for i, s := range in {
		if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			v.Add(fmt.Sprintf("%s[%d]", field, i), "must not contain control characters")
		}
	}
}

func dedupe(v *validation.Errors, field string, in []string, most int) []string {
	if len(in) > most {
		v.Add(field, fmt.Sprintf("must have at most %d entries", most))
	}
	out := make([]string, 0, len(in))
	for i, s := range in {
		if n := utf8.RuneCountInString(s); n == 0 || n > MaxTagLength || !utf8.ValidString(s) {
			v.Add(fmt.Sprintf("%s[%d]", field, i), fmt.Sprintf("must be 1 to %d characters", MaxTagLength))
			continue
		}
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Register creates an ACTIVE worker at now.
func Register(p RegisterParams, now time.Time) (*Worker, event.Event, error) {
	if err := ValidateRegister(&p); err != nil {
		return nil, event.Event{}, err
	}
	w := &Worker{s: Snapshot{
		ID: p.ID, Queues: p.Queues, Tags: p.Tags, Status: StatusActive,
		RegisteredAt: now, LastHeartbeatAt: now, Owner: p.Owner,
	}}
	return w, w.event(event.WorkerRegistered, "", now), nil
}

// Reregister updates an existing worker's queues and tags and makes it
// ACTIVE again, whatever its status (a DEAD worker comes back this way). It
// clears a drain request: a registration is a fresh start. A worker that
// belongs to no key becomes p.Owner's; one that has an owner keeps it
// (whether p.Owner may register it at all is domain/apikey's rule).
func (w *Worker) Reregister(p RegisterParams, now time.Time) (event.Event, error) {
	p.ID = w.s.ID
	if err := ValidateRegister(&p); err != nil {
		return event.Event{}, err
	}
	from := w.s.Status
	w.s.Queues, w.s.Tags = p.Queues, p.Tags
	w.s.Status = StatusActive
	w.s.LastHeartbeatAt = now
	w.s.Draining = false
	if w.s.Owner == "" {
		w.s.Owner = p.Owner
	}
	return w.event(event.WorkerRegistered, from, now), nil
}

// Draining reports whether the worker was asked to stop claiming.
func (w *Worker) Draining() bool { return w.s.Draining }

// Drain asks the worker to stop claiming: its claims return no tasks and
// its heartbeats tell it to drain, while it keeps its tasks and finishes
// them. Its liveness status does not change. The first request produces
// worker.draining; a repeated one changes nothing and produces no event.
func (w *Worker) Drain(now time.Time) []event.Event {
	if w.s.Draining {
		return nil
	}
	w.s.Draining = true
	return []event.Event{w.event(event.WorkerDraining, w.s.Status, now)}
}

// Heartbeat records a sign of life. A STALE worker is revived (and the
// revival event returned); a DEAD one gets ErrDead and must register again.
func (w *Worker) Heartbeat(now time.Time) ([]event.Event, error) {
	switch w.s.Status {
	case StatusDead:
		return nil, ErrDead
	case StatusStale:
		w.s.Status = StatusActive
		w.s.LastHeartbeatAt = now
		return []event.Event{w.event(event.WorkerRevived, StatusStale, now)}, nil
	default:
		w.s.LastHeartbeatAt = now
		return nil, nil
	}
}

// RefreshInterval is how stale an ACTIVE worker's heartbeat time may get
// before a sign of life other than a heartbeat (claim, complete, fail) saves
// it again; it keeps a busy worker from hot-spotting its row.
const RefreshInterval = time.Second

// SignOfLife records activity other than a heartbeat. It revives a STALE
// worker, refreshes an ACTIVE one whose last heartbeat is at least
// RefreshInterval old, and reports whether anything changed. A DEAD worker
// gets ErrDead.
func (w *Worker) SignOfLife(now time.Time) ([]event.Event, bool, error) {
	switch {
	case w.s.Status == StatusDead:
		return nil, false, ErrDead
	case w.s.Status == StatusStale:
		events, err := w.Heartbeat(now)
		return events, true, err
	case now.Sub(w.s.LastHeartbeatAt) >= RefreshInterval:
		w.s.LastHeartbeatAt = now
		return nil, true, nil
	default:
		return nil, false, nil
	}
}

// CanClaim reports whether the worker may claim: any status but DEAD.
func (w *Worker) CanClaim() error {
	if w.s.Status == StatusDead {
		return ErrDead
	}
	return nil
}

// CheckLiveness applies the thresholds at now: ACTIVE -> STALE, ACTIVE or
// STALE -> DEAD. It returns the event of the change, if any.
func (w *Worker) CheckLiveness(c LivenessConfig, now time.Time) (event.Event, bool) {
	if w.s.Status == StatusDead {
		return event.Event{}, false
	}
	next := c.Liveness(w.s.LastHeartbeatAt, now)
	if next == w.s.Status || (next == StatusActive) {
		return event.Event{}, false
	}
	from := w.s.Status
	w.s.Status = next
	typ := event.WorkerStale
	if next == StatusDead {
		typ = event.WorkerDied
	}
	return w.event(typ, from, now), true
}

func (w *Worker) event(typ event.Type, from Status, at time.Time) event.Event {
	return event.Event{
		Version:    event.Version,
		Type:       typ,
		WorkerID:   w.s.ID,
		Queues:     slices.Clone(w.s.Queues),
		From:       string(from),
		To:         string(w.s.Status),
		OccurredAt: at,
	}
}
