package task

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// MaxFilterTextLength bounds a filter's error_contains and text, in
// characters.
const MaxFilterTextLength = 200

// Filter selects tasks by what an operator sees of them: the task listing
// and the bulk actions (retry, cancel or purge everything a filter matches)
// use it. The zero value matches every task; Matches is the rule, and
// storage encodes exactly it (a test checks they agree).
type Filter struct {
	// Queue, when not empty, is the task's queue.
	Queue string
	// Statuses, when not empty, lists the statuses a task may have.
	Statuses []Status
	// DeadReason, when not empty, is the task's dead reason.
	DeadReason DeadReason
	// GroupKey, when not empty, is the task's group.
	GroupKey string
	// CreatedAfter and CreatedBefore, when not nil, bound created_at
	// (exclusive both).
	CreatedAfter, CreatedBefore *time.Time
	// ErrorContains, when not empty, must occur in the task's last error,
	// ignoring case.
	ErrorContains string
	// Text, when not empty, must occur in the task's last error or in its
	// idempotency key, ignoring case (the dashboard's search box).
	Text string
	// Metadata, when not empty, are pairs the task's metadata must all
	// hold (equality of each key's value).
	Metadata map[string]string
	// WorkflowID, when not uuid.Nil, is the task's run.
	WorkflowID uuid.UUID

	// The fields below are set by the runs of bulk actions, never by the
	// API: they keep a run to the tasks as they were when it began.

	// UpdatedBefore, when not nil, bounds updated_at (exclusive): a task
	// changed since the run began (retried, then DEAD again) is left out.
	UpdatedBefore *time.Time
	// WithoutCancelRequest leaves out RUNNING tasks whose cancellation was
	// already requested: cancelling them again would change nothing.
	WithoutCancelRequest bool
}

// Matches reports whether t passes the filter.
func (f Filter) Matches(t *Task) bool {
	s := t.s
	switch {
	case f.Queue != "" && s.Queue != f.Queue,
		len(f.Statuses) > 0 && !slices.Contains(f.Statuses, s.Status),
		f.DeadReason != "" && s.DeadReason != f.DeadReason,
		f.GroupKey != "" && s.GroupKey != f.GroupKey,
		f.CreatedAfter != nil && !s.CreatedAt.After(*f.CreatedAfter),
		f.CreatedBefore != nil && !s.CreatedAt.Before(*f.CreatedBefore),
		f.ErrorContains != "" && !containsFold(s.LastError, f.ErrorContains),
		f.Text != "" && !containsFold(s.LastError, f.Text) && !containsFold(s.IdempotencyKey, f.Text),
		f.UpdatedBefore != nil && !s.UpdatedAt.Before(*f.UpdatedBefore),
		f.WithoutCancelRequest && s.CancelRequestedAt != nil,
		f.WorkflowID != uuid.Nil && s.WorkflowID != f.WorkflowID,
		!t.HasMetadata(f.Metadata):
		return false
	}
	return true
}

// containsFold reports whether sub occurs in s ignoring case, as storage's
// strpos(lower(s), lower(sub)) does.
func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// Validate checks the filter's fields (queue name, statuses, dead reason,
// group, time range, text lengths), naming them as the API does.
func (f Filter) Validate() error {
	var v validation.Errors
	f.check(&v)
	return v.Err()
}

func (f Filter) check(v *validation.Errors) {
	if f.Queue != "" {
		CheckQueue(v, "queue", f.Queue)
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			v.Add("status", fmt.Sprintf("%q is not a status (%s)", string(s), JoinStatuses(Statuses)))
		}
	}
	if f.DeadReason != "" {
		if !slices.Contains(DeadReasons, f.DeadReason) {
			v.Add("dead_reason", fmt.Sprintf("%q is not a dead reason", string(f.DeadReason)))
		} else if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, StatusDead) {
			v.Add("dead_reason", "only DEAD tasks have a dead reason")
		}
	}
	if n := utf8.RuneCountInString(f.GroupKey); n > MaxGroupKeyLength || !validation.Text(f.GroupKey) {
		v.Add("group_key", fmt.Sprintf("must be 1 to %d characters of valid UTF-8, without NUL", MaxGroupKeyLength))
	}
	if f.CreatedAfter != nil && f.CreatedBefore != nil && !f.CreatedAfter.Before(*f.CreatedBefore) {
		v.Add("created_after", "must be before created_before")
	}
	checkMetadataFilter(v, f.Metadata)
	for _, text := range [][2]string{{"error_contains", f.ErrorContains}, {"text", f.Text}} {
		if utf8.RuneCountInString(text[1]) > MaxFilterTextLength || !validation.Text(text[1]) {
			v.Add(text[0], fmt.Sprintf("must be 1 to %d characters of valid UTF-8, without NUL", MaxFilterTextLength))
		}
	}
}

// ParseStatuses reads a comma-separated list of statuses ("PENDING,DEAD");
// an empty string is no status. It does not validate them (Filter.Validate
// does).
func ParseStatuses(s string) []Status {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]Status, len(parts))
	for i, p := range parts {
		out[i] = Status(strings.TrimSpace(p))
	}
	return out
}

// JoinStatuses writes statuses as ParseStatuses reads them.
func JoinStatuses(ss []Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ",")
}

// BulkAction is what a bulk action does to every task its filter matches.
type BulkAction string

const (
	// BulkRetry retries DEAD tasks (Task.Retry).
	BulkRetry BulkAction = "retry"
	// BulkCancel cancels PENDING and BLOCKED tasks and asks the holders of
	// RUNNING ones to stop them (Task.Cancel).
	BulkCancel BulkAction = "cancel"
	// BulkReplay makes a new task of each DONE or DEAD task (Replay); it
	// changes none of them.
	BulkReplay BulkAction = "replay"
)

// Statuses are the statuses the action can change: a filter for it names
// some of them, or takes them all.
func (a BulkAction) Statuses() []Status {
	switch a {
	case BulkRetry:
		return []Status{StatusDead}
	case BulkReplay:
		return []Status{StatusDone, StatusDead}
	}
	return []Status{StatusPending, StatusBlocked, StatusRunning}
}

// Apply is the action's transition of one task: the single-task action's
// (a *TransitionError when its status does not allow it). A replay changes
// no task: it has no transition (Replay makes the new task).
func (a BulkAction) Apply(t *Task, now time.Time) (event.Event, error) {
	switch a {
	case BulkRetry:
		return t.Retry(now)
	case BulkCancel:
		return t.Cancel(now)
	}
	return event.Event{}, fmt.Errorf("a bulk %s changes no task", a)
}

// ForBulk validates f as the filter of a bulk action and returns it with
// its statuses settled: they default to those the action can change (DEAD
// for a retry; PENDING, BLOCKED and RUNNING for a cancel), and naming any
// other is a validation error rather than a run that changes nothing. A
// cancel leaves out RUNNING tasks already asked to stop.
func (f Filter) ForBulk(a BulkAction) (Filter, error) {
	var v validation.Errors
	if a != BulkRetry && a != BulkCancel && a != BulkReplay {
		v.Add("action", "must be retry, cancel or replay")
		return f, v.Err()
	}
	f.check(&v)
	allowed := a.Statuses()
	for _, s := range f.Statuses {
		if s.Valid() && !slices.Contains(allowed, s) {
			v.Add("status", fmt.Sprintf("%s changes only %s tasks, not %s", a, JoinStatuses(allowed), s))
		}
	}
	if a == BulkCancel && f.DeadReason != "" {
		v.Add("dead_reason", "cancel changes no DEAD task")
	}
	if err := v.Err(); err != nil {
		return f, err
	}
	if len(f.Statuses) == 0 {
		f.Statuses = allowed
	}
	f.WithoutCancelRequest = a == BulkCancel
	return f, nil
}

// Fields returns the filter by the API's field names, for audit events
// (times in RFC 3339, statuses comma-separated); absent fields are left out.
func (f Filter) Fields() map[string]string {
	out := map[string]string{}
	add := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	add("queue", f.Queue)
	add("status", JoinStatuses(f.Statuses))
	add("dead_reason", string(f.DeadReason))
	add("group_key", f.GroupKey)
	if f.CreatedAfter != nil {
		add("created_after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if f.CreatedBefore != nil {
		add("created_before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	add("error_contains", f.ErrorContains)
	add("text", f.Text)
	if f.WorkflowID != uuid.Nil {
		add("workflow_id", f.WorkflowID.String())
	}
	for k, val := range f.Metadata {
		out[MetadataFilterPrefix+k] = val
	}
	return out
}

// MetadataFilterPrefix starts the name of a metadata filter's field:
// metadata.<key>=<value> (query parameters, bulk filters, audit events).
const MetadataFilterPrefix = "metadata."

// checkMetadataFilter adds to v what is wrong with a filter's metadata
// pairs: a key that is not one, a value no task can have, or more pairs
// than a task's metadata holds.
func checkMetadataFilter(v *validation.Errors, m map[string]string) {
	if len(m) > MaxMetadataKeys {
		v.Add("metadata", fmt.Sprintf("must filter on at most %d keys", MaxMetadataKeys))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		switch {
		case !ValidMetadataKey(k):
			v.Add(MetadataFilterPrefix+k, fmt.Sprintf("the key must be 1 to %d characters of %s", MaxMetadataKeyLength, MetadataKeySet))
		case !ValidMetadataValue(m[k]):
			v.Add(MetadataFilterPrefix+k, fmt.Sprintf("must be at most %d printable characters (no control characters)", MaxMetadataValueLength))
		}
	}
}
