package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/taskmaster/taskmaster/adapters/jsontext"
)

// The bodies of the hot responses (tasks, claims, batch submits and batch
// reports) are written by hand rather than by encoding/json's reflection:
// in the batch benchmark encoding them took a sixth of the server's CPU,
// most of it walking TaskJSON's 26 fields by reflection and re-validating
// every payload and result (json.RawMessage), which PostgreSQL's jsonb has
// already validated. The output is byte for byte what encoding/json writes
// with SetEscapeHTML(false) (TestAppendJSONMatchesEncodingJSON and
// FuzzAppendJSONString compare them): strings escape ", \, control
// characters, U+2028 and U+2029, and replace invalid UTF-8 with U+FFFD, but
// leave <, > and & alone; raw JSON (payloads, results) is compacted, not
// escaped.
//
// A body that could be large (a batch's thousand tasks, a task with a 32 MiB
// payload) is never held whole: the appenders hand what they have appended
// to a spill function between the tasks of a list and every spillSize bytes
// of a payload or result, which writes it out once it passes spillSize. So
// a response costs spillSize of buffer, besides the tasks it is made of.

// spillFunc takes the body appended so far; it may write it out and
// return it emptied. A nil spillFunc keeps everything.
type spillFunc func(b []byte) []byte

// spill hands b to f, when there is one.
func (f spillFunc) spill(b []byte) []byte {
	if f == nil {
		return b
	}
	return f(b)
}

// spillSize is how much of a body is appended before it is written out.
const spillSize = 64 << 10

// jsonAppender is a response body that appends its own JSON encoding to b.
// When checkTimes reports a time outside years 0-9999 (which encoding/json
// refuses too), the body goes through encoding/json instead (which sends
// nothing); checkTimes runs before anything is written, since the body
// may be written out as it is appended.
type jsonAppender interface {
	checkTimes() error
	appendJSON(b []byte, spill spillFunc) ([]byte, error)
}

// bodyPool recycles response buffers; buffers that grew past maxPooledBody
// (large payloads) are left to the garbage collector rather than kept.
var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBody = 1 << 20

// errJSONTime is a time encoding/json refuses to encode.
var errJSONTime = errors.New("json: time outside years 0-9999")

// writeAppended writes v's JSON and a newline (as json.Encoder does), a
// spillSize at a time, and reports whether it could; when not, nothing was
// written.
func writeAppended(w interface{ Write([]byte) (int, error) }, v jsonAppender) bool {
	if v.checkTimes() != nil {
		return false
	}
	bp := bodyPool.Get().(*[]byte)
	spilled := false
	b, err := v.appendJSON((*bp)[:0], func(b []byte) []byte {
		if len(b) < spillSize {
			return b
		}
		_, _ = w.Write(b) // the client went away; nothing to do
		spilled = true
		return b[:0]
	})
	if err == nil {
		b = append(b, '\n')
		_, _ = w.Write(b)
	}
	if cap(b) <= maxPooledBody {
		*bp = b[:0]
		bodyPool.Put(bp)
	}
	if err != nil && spilled {
		// Part of the body is out: the client must not take it whole.
		panic(http.ErrAbortHandler)
	}
	return err == nil
}

// appendJSONValue appends v as encoding/json (HTML escaping off) encodes it,
// for the parts of a hot response that are rare (problems, retry policies).
func appendJSONValue(b []byte, v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return b, err
	}
	return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...), nil
}

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping off.
func appendJSONString(b []byte, s string) []byte { return jsontext.AppendString(b, s, false) }

// appendRawJSON appends raw, a valid JSON text (a payload or result as
// PostgreSQL renders jsonb), without the whitespace between its tokens, as
// encoding/json compacts a json.RawMessage; empty is null. It does not
// validate raw: the stored values are valid JSON. A large raw is handed to
// spill every spillSize bytes.
func appendRawJSON(b []byte, raw json.RawMessage, spill spillFunc) []byte {
	if len(raw) == 0 {
		return append(b, "null"...)
	}
	inString, escaped := false, false
	start := 0
	for i, c := range raw {
		if i-start >= spillSize {
			b = spill.spill(append(b, raw[start:i]...))
			start = i
		}
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			b = append(b, raw[start:i]...)
			start = i + 1
		}
	}
	return append(b, raw[start:]...)
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

// appendTime appends t as time.Time's MarshalJSON does; jsonTime tells the
// times it refuses.
func appendTime(b []byte, t time.Time) []byte { return jsontext.AppendTime(b, t) }

func appendOptTime(b []byte, t *time.Time) []byte {
	if t == nil {
		return append(b, "null"...)
	}
	return appendTime(b, *t)
}

// jsonTime reports whether encoding/json encodes t (years 0-9999); a nil
// optional time is null.
func jsonTime(t *time.Time) bool { return t == nil || jsontext.TimeOK(*t) }

func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

func appendBools(b []byte, bs []bool) []byte {
	if bs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, v := range bs {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendBool(b, v)
	}
	return append(b, ']')
}

// checkTimes reports errJSONTime when a time of the task is one
// encoding/json refuses.
func (t *TaskJSON) checkTimes() error {
	for _, tm := range [...]*time.Time{&t.RunAt, &t.CreatedAt, &t.UpdatedAt, t.Deadline, t.ClaimedAt,
		t.FinishedAt, t.LeaseExpiresAt, t.CancelRequestedAt, t.ScheduleTick, t.TimeoutAt, t.DebounceUntil} {
		if !jsonTime(tm) {
			return errJSONTime
		}
	}
	if t.Progress != nil && !jsonTime(&t.Progress.UpdatedAt) {
		return errJSONTime
	}
	return nil
}

// checkTaskTimes is checkTimes of every task of ts.
func checkTaskTimes(ts []TaskJSON) error {
	for i := range ts {
		if err := ts[i].checkTimes(); err != nil {
			return err
		}
	}
	return nil
}

// appendObject appends the task as a JSON object. (Not appendJSON: types
// that embed TaskJSON would inherit it and lose their own members.)
func (t *TaskJSON) appendObject(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, '{')
	b, err := t.appendFields(b, spill)
	return append(b, '}'), err
}

// appendFields appends the task's members without the braces, so types
// that embed TaskJSON can add theirs. Its times must have been checked
// (checkTimes).
func (t *TaskJSON) appendFields(b []byte, spill spillFunc) ([]byte, error) {
	var err error
	b = append(b, `"id":`...)
	b = appendJSONString(b, t.ID)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, t.Queue)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, t.Status)
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(t.Priority), 10)
	b = append(b, `,"payload":`...)
	b = appendRawJSON(b, t.Payload, spill)
	b = append(b, `,"tags":`...)
	b = appendStrings(b, t.Tags)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(t.MaxAttempts), 10)
	b = append(b, `,"worker_id":`...)
	b = appendOptString(b, t.WorkerID)
	b = append(b, `,"lease_id":`...)
	b = appendOptString(b, t.LeaseID)
	b = append(b, `,"last_error":`...)
	b = appendOptString(b, t.LastError)
	b = append(b, `,"dead_reason":`...)
	b = appendOptString(b, t.DeadReason)
	b = append(b, `,"result":`...)
	b = appendRawJSON(b, t.Result, spill)
	b = append(b, `,"deadline":`...)
	b = appendOptTime(b, t.Deadline)
	b = append(b, `,"run_at":`...)
	b = appendTime(b, t.RunAt)
	b = append(b, `,"idempotency_key":`...)
	b = appendOptString(b, t.IdempotencyKey)
	b = append(b, `,"created_at":`...)
	b = appendTime(b, t.CreatedAt)
	b = append(b, `,"claimed_at":`...)
	b = appendOptTime(b, t.ClaimedAt)
	b = append(b, `,"finished_at":`...)
	b = appendOptTime(b, t.FinishedAt)
	b = append(b, `,"updated_at":`...)
	b = appendTime(b, t.UpdatedAt)
	b = append(b, `,"lease_expires_at":`...)
	b = appendOptTime(b, t.LeaseExpiresAt)
	b = append(b, `,"cancel_requested_at":`...)
	b = appendOptTime(b, t.CancelRequestedAt)
	b = append(b, `,"unique_key":`...)
	b = appendOptString(b, t.UniqueKey)
	b = append(b, `,"retry":`...)
	if t.Retry == nil {
		b = append(b, "null"...)
	} else if b, err = appendJSONValue(b, t.Retry); err != nil {
		return b, err
	}
	b = append(b, `,"snoozes":`...)
	b = strconv.AppendInt(b, int64(t.Snoozes), 10)
	b = append(b, `,"group_key":`...)
	b = appendOptString(b, t.GroupKey)
	b = append(b, `,"timeout_seconds":`...)
	if t.TimeoutSeconds == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*t.TimeoutSeconds), 10)
	}
	b = append(b, `,"timeout_at":`...)
	b = appendOptTime(b, t.TimeoutAt)
	b = append(b, `,"metadata":`...)
	b = appendStringMap(b, t.Metadata)
	// Traces and progress are rare and short: encoding/json writes them
	// (its float format and its time checks included).
	b = append(b, `,"trace":`...)
	if t.Trace == nil {
		b = append(b, "null"...)
	} else if b, err = appendJSONValue(b, t.Trace); err != nil {
		return b, err
	}
	b = append(b, `,"progress":`...)
	if t.Progress == nil {
		b = append(b, "null"...)
	} else if b, err = appendJSONValue(b, t.Progress); err != nil {
		return b, err
	}
	b = append(b, `,"schedule_name":`...)
	b = appendOptString(b, t.ScheduleName)
	b = append(b, `,"schedule_tick":`...)
	b = appendOptTime(b, t.ScheduleTick)
	b = append(b, `,"workflow_id":`...)
	b = appendJSONString(b, t.WorkflowID)
	b = append(b, `,"replay_of":`...)
	b = appendOptString(b, t.ReplayOf)
	b = append(b, `,"debounce_until":`...)
	b = appendOptTime(b, t.DebounceUntil)
	return b, nil
}

// appendStringMap appends m as encoding/json does: keys sorted, null for
// a nil map.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// taskBody is one task as a response body.
type taskBody struct{ task *TaskJSON }

func (t taskBody) checkTimes() error { return t.task.checkTimes() }

// appendJSON implements jsonAppender.
func (t taskBody) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	return t.task.appendObject(b, spill)
}

// appendTasks appends ts as a JSON array, spilling after each task.
func appendTasks(b []byte, ts []TaskJSON, spill spillFunc) ([]byte, error) {
	if ts == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i := range ts {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = ts[i].appendObject(b, spill); err != nil {
			return b, err
		}
		b = spill.spill(b)
	}
	return append(b, ']'), nil
}

func (c CompleteResponse) checkTimes() error {
	if err := c.TaskJSON.checkTimes(); err != nil {
		return err
	}
	return checkTaskTimes(c.Enqueued)
}

// appendJSON implements jsonAppender.
func (c CompleteResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, '{')
	b, err := c.appendFields(b, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"enqueued":`...)
	b, err = appendTasks(b, c.Enqueued, spill)
	return append(b, '}'), err
}

func (c claimResponse) checkTimes() error {
	if err := checkTaskTimes(c.Tasks); err != nil {
		return err
	}
	if err := checkOutcomeTimes(c.Completed); err != nil {
		return err
	}
	return checkOutcomeTimes(c.Failed)
}

// appendJSON implements jsonAppender.
func (c claimResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, `{"tasks":`...)
	b, err := appendTasks(b, c.Tasks, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, c.Truncated)
	if len(c.Completed) > 0 {
		b = append(b, `,"completed":`...)
		if b, err = appendOutcomes(b, c.Completed, spill); err != nil {
			return b, err
		}
	}
	if len(c.Failed) > 0 {
		b = append(b, `,"failed":`...)
		if b, err = appendOutcomes(b, c.Failed, spill); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func (l listTasksResponse) checkTimes() error { return checkTaskTimes(l.Tasks) }

// appendJSON implements jsonAppender.
func (l listTasksResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, `{"tasks":`...)
	b, err := appendTasks(b, l.Tasks, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"next_cursor":`...)
	b = appendOptString(b, l.NextCursor)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, l.Truncated)
	return append(b, '}'), nil
}

func (p parentsResponse) checkTimes() error { return checkTaskTimes(p.Parents) }

// appendJSON implements jsonAppender.
func (p parentsResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, `{"parents":`...)
	b, err := appendTasks(b, p.Parents, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"next_cursor":`...)
	b = appendOptString(b, p.NextCursor)
	b = append(b, `,"truncated":`...)
	b = strconv.AppendBool(b, p.Truncated)
	return append(b, '}'), nil
}

func (d TaskDetailJSON) checkTimes() error { return d.TaskJSON.checkTimes() }

// appendJSON implements jsonAppender.
func (d TaskDetailJSON) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, '{')
	b, err := d.appendFields(b, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"depends_on":`...)
	b = appendStrings(b, d.DependsOn)
	b = append(b, `,"blocked_by":`...)
	b = appendStrings(b, d.BlockedBy)
	return append(b, '}'), nil
}

func (s BatchSubmitResponse) checkTimes() error { return checkTaskTimes(s.Tasks) }

// appendJSON implements jsonAppender.
func (s BatchSubmitResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, `{"tasks":`...)
	b, err := appendTasks(b, s.Tasks, spill)
	if err != nil {
		return b, err
	}
	b = append(b, `,"created":`...)
	b = appendBools(b, s.Created)
	return append(b, '}'), nil
}

func (o *ItemOutcome) checkTimes() error {
	if o.Task != nil {
		if err := o.Task.checkTimes(); err != nil {
			return err
		}
	}
	if o.Enqueued != nil {
		return checkTaskTimes(*o.Enqueued)
	}
	return nil
}

// appendObject appends the outcome as a JSON object.
func (o *ItemOutcome) appendObject(b []byte, spill spillFunc) ([]byte, error) {
	var err error
	b = append(b, `{"id":`...)
	b = appendJSONString(b, o.ID)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, o.Outcome)
	if o.Task != nil {
		b = append(b, `,"task":`...)
		if b, err = o.Task.appendObject(b, spill); err != nil {
			return b, err
		}
	}
	if o.Problem != nil {
		b = append(b, `,"problem":`...)
		if b, err = appendJSONValue(b, o.Problem); err != nil {
			return b, err
		}
	}
	if o.Enqueued != nil {
		b = append(b, `,"enqueued":`...)
		if b, err = appendTasks(b, *o.Enqueued, spill); err != nil {
			return b, err
		}
	}
	return append(b, '}'), nil
}

func (r BatchReportResponse) checkTimes() error { return checkOutcomeTimes(r.Items) }

// checkOutcomeTimes is checkTimes of every outcome's tasks.
func checkOutcomeTimes(items []ItemOutcome) error {
	for i := range items {
		if err := items[i].checkTimes(); err != nil {
			return err
		}
	}
	return nil
}

// appendJSON implements jsonAppender.
func (r BatchReportResponse) appendJSON(b []byte, spill spillFunc) ([]byte, error) {
	b = append(b, `{"items":`...)
	b, err := appendOutcomes(b, r.Items, spill)
	return append(b, '}'), err
}

// appendOutcomes appends items as a JSON array (null when nil).
func appendOutcomes(b []byte, items []ItemOutcome, spill spillFunc) ([]byte, error) {
	if items == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i := range items {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = items[i].appendObject(b, spill); err != nil {
			return b, err
		}
		b = spill.spill(b)
	}
	return append(b, ']'), nil
}
