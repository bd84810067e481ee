package http

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// encodingJSON is what writeJSON sent before the hand-written encoders:
// encoding/json with HTML escaping off.
func encodingJSON(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v))
	return buf.String()
}

func written(v any) string {
	rec := httptest.NewRecorder()
	writeJSON(rec, 200, v)
	return rec.Body.String()
}

// tricky holds what string escaping must get right.
const tricky = "<a href=\"x\">&amp;</a> \\ \u2028\u2029 \x00\x01\x1f\x7f \b\f\n\r\t é😀 \xff\xfe \xe2\x80 end"

func fullTask() TaskJSON {
	s := func(v string) *string { return &v }
	f := func(v float64) *float64 { return &v }
	at := time.Date(2026, 11, 23, 5, 6, 7, 120000000, time.UTC)
	later := at.Add(time.Hour + 999*time.Microsecond)
	return TaskJSON{
		ID: "0b6c1f5e-3d0e-4f55-9a51-4f0b8c1d2e3f", Queue: "q<&>" + tricky, Status: "RUNNING", Priority: -7,
		Payload: json.RawMessage("{\"a\": \"x y\", \"b\": [1, 2.50, {\"c\": \"\\\" : , \\\\\"}], \"d\": \"\\\\\", \"u\": \"\u2028<&>\", \"e\": {}, \"f\": []}"),
		Tags:    []string{"", "t", tricky}, Attempts: 3, MaxAttempts: 25,
		WorkerID: s("w-" + tricky), LeaseID: s("5f4e3d2c-1b0a-4f9e-8d7c-6b5a49382716"), LastError: s(tricky),
		DeadReason: s("max_attempts"), Result: json.RawMessage(" [ true , false , null , \"\u2029\" ] "),
		Deadline: &later, RunAt: at, IdempotencyKey: s("k\u2028"), CreatedAt: at.Add(-time.Second),
		ClaimedAt: &at, FinishedAt: &later, UpdatedAt: later, LeaseExpiresAt: &later, CancelRequestedAt: &at,
		UniqueKey: s("u<"), Retry: &retryJSON{BaseSeconds: f(0.0000001), MaxSeconds: f(1e21), Jitter: s("full")},
		Snoozes: 2, GroupKey: s("g&"), ScheduleName: s("nightly<"), ScheduleTick: &at,
		TimeoutSeconds: func(n int) *int { return &n }(3600), TimeoutAt: &later,
		Metadata:   map[string]string{"z": tricky, "a": "", "tenant.id": "<&>", tricky: "k"},
		Trace:      &TraceJSON{Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: s("a=" + tricky)},
		Progress:   &ProgressJSON{Percent: 1e-7, Message: tricky, Details: json.RawMessage(`{"n": [1, 2]}`), UpdatedAt: at},
		WorkflowID: "7a6c1f5e-3d0e-4f55-9a51-4f0b8c1d2e3f", ReplayOf: s("1b6c1f5e-3d0e-4f55-9a51-4f0b8c1d2e3f<"), DebounceUntil: &later,
	}
}

func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	full, bare := fullTask(), TaskJSON{}
	local := fullTask()
	loc := time.FixedZone("", 5*3600+30*60)
	local.RunAt = local.RunAt.In(loc)
	local.Retry = &retryJSON{}
	enqueued := []TaskJSON{full, bare}
	empty := []TaskJSON{}
	cursor := "AZHCpz1Nd7-EjONLBIFv9Q"
	problem := Problem{Type: ProblemTypePrefix + "lease-lost", Title: "Lease lost", Status: 409, Detail: "<&> " + tricky,
		Errors: []validation.FieldError{{Field: "a<", Message: "b&"}}, CurrentStatus: "DONE"}
	for name, v := range map[string]any{
		"task":                full,
		"bare task":           bare,
		"task in a time zone": local,
		"claim":               claimResponse{Tasks: []TaskJSON{full, bare, local}, Truncated: true},
		"empty claim":         claimResponse{Tasks: []TaskJSON{}},
		"nil claim":           claimResponse{},
		"claim with reports": claimResponse{Tasks: []TaskJSON{full}, Completed: []ItemOutcome{{ID: "a", Outcome: "done", Task: &full}},
			Failed: []ItemOutcome{{ID: "b", Outcome: "error", Problem: &problem}, {ID: "c", Outcome: "requeued", Task: &bare}}},
		"claim with completions": claimResponse{Tasks: []TaskJSON{}, Completed: []ItemOutcome{{ID: "a", Outcome: "done", Task: &bare}}},
		"claim with failures":    claimResponse{Tasks: []TaskJSON{}, Failed: []ItemOutcome{{ID: "b", Outcome: "dead", Task: &bare}}},
		"batch submit":           BatchSubmitResponse{Tasks: []TaskJSON{full, bare}, Created: []bool{true, false}},
		"empty batch submit":     BatchSubmitResponse{},
		"complete":               CompleteResponse{TaskJSON: full},
		"complete and enqueue":   CompleteResponse{TaskJSON: full, Enqueued: enqueued},
		"batch report": BatchReportResponse{Items: []ItemOutcome{
			{ID: "a", Outcome: "done", Task: &full},
			{ID: "b", Outcome: "error", Problem: &problem},
			{ID: "c", Outcome: "done", Task: &bare, Enqueued: &enqueued},
			{ID: "d", Outcome: "done", Task: &bare, Enqueued: &empty},
		}},
		"empty batch report": BatchReportResponse{Items: []ItemOutcome{}},
		"nil batch report":   BatchReportResponse{},
		// Types that embed TaskJSON keep their own members.
		"task detail":      TaskDetailJSON{TaskJSON: full, DependsOn: []string{"x"}, BlockedBy: []string{}},
		"bare task detail": TaskDetailJSON{TaskJSON: bare},
		"listing":          listTasksResponse{Tasks: []TaskJSON{full, bare}, NextCursor: &cursor, Truncated: true},
		"last listing":     listTasksResponse{Tasks: []TaskJSON{}},
		"parents":          parentsResponse{Parents: []TaskJSON{bare, full}, NextCursor: &cursor, Truncated: true},
		"no parents":       parentsResponse{},
	} {
		require.Equal(t, encodingJSON(t, v), written(v), name)
	}
}

func TestAppendJSONFallsBackWhereEncodingJSONRefuses(t *testing.T) {
	t.Parallel()
	task := fullTask()
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	task.ClaimedAt = &far
	_, err := json.Marshal(task)
	require.Error(t, err, "encoding/json refuses years past 9999")
	require.Empty(t, written(task), "as before: no body")
	require.Empty(t, written(claimResponse{Tasks: []TaskJSON{fullTask(), task}}))
	// Every time of a task is checked, not only the one above.
	for name, set := range map[string]func(*TaskJSON){
		"run_at": func(t *TaskJSON) { t.RunAt = far }, "created_at": func(t *TaskJSON) { t.CreatedAt = far },
		"updated_at": func(t *TaskJSON) { t.UpdatedAt = far }, "deadline": func(t *TaskJSON) { t.Deadline = &far },
		"finished_at": func(t *TaskJSON) { t.FinishedAt = &far }, "lease_expires_at": func(t *TaskJSON) { t.LeaseExpiresAt = &far },
		"cancel_requested_at": func(t *TaskJSON) { t.CancelRequestedAt = &far },
		"timeout_at":          func(t *TaskJSON) { t.TimeoutAt = &far },
		"progress.updated_at": func(t *TaskJSON) { t.Progress.UpdatedAt = far },
		"schedule_tick":       func(t *TaskJSON) { t.ScheduleTick = &far },
		"debounce_until":      func(t *TaskJSON) { t.DebounceUntil = &far },
	} {
		task := fullTask()
		set(&task)
		require.Empty(t, written(task), name)
	}
}

// Bodies larger than spillSize are written out as they are appended, a
// spillSize at a time, and come out byte for byte as encoding/json writes
// them: a batch of tasks, a task whose payload alone is 40 spills.
func TestLargeBodiesAreWrittenAsTheyAreAppended(t *testing.T) {
	t.Parallel()
	big := fullTask()
	big.Payload = json.RawMessage(`{"a": "` + strings.Repeat("x y", 40*spillSize/3) + `", "b": [` + strings.Repeat("1, ", 20000) + `2]}`)
	many := make([]TaskJSON, 300)
	for i := range many {
		many[i] = fullTask()
	}
	for name, v := range map[string]any{
		"task":        big,
		"batch":       BatchSubmitResponse{Tasks: many, Created: make([]bool, len(many))},
		"claim":       claimResponse{Tasks: append(many, big)},
		"task detail": TaskDetailJSON{TaskJSON: big, DependsOn: []string{}, BlockedBy: []string{}},
	} {
		w := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
		writeJSON(w, 200, v)
		require.Equal(t, encodingJSON(t, v), w.Body.String(), name)
		require.Greater(t, w.writes, 2, "%s: written in parts", name)
		require.LessOrEqual(t, w.largest, 2*spillSize+4096, "%s: no write holds much more than a spill", name)
	}
}

// countingWriter counts the writes of a body and remembers the largest.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes, largest int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	w.largest = max(w.largest, len(b))
	return w.ResponseRecorder.Write(b)
}

func TestAppendRawJSONCompactsAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`null`, `  1  `, `"a b"`, `{"a": 1, "b": [1, 2]}`, "{\n\t\"a\" :\r\n \"\\\\\" , \"b\": \"\\\" \"}",
		`["\\\\", " ", "\" \\\" "]`, "\"<&>\u2028\u2029 \"", `{}`, `[ ]`, `-0.0e+1`,
	} {
		var want bytes.Buffer
		require.NoError(t, json.Compact(&want, []byte(raw)))
		require.Equal(t, want.String(), string(appendRawJSON(nil, json.RawMessage(raw), nil)), raw)
	}
	require.Equal(t, "null", string(appendRawJSON(nil, nil, nil)))
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", tricky, "\u2028", "\xe2\x80\xa8", "\xe2\x80", "\xed\xa0\x80", "\U0010ffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := encodingJSON(t, s)
		require.Equal(t, want[:len(want)-1], string(appendJSONString(nil, s)))
	})
}

func FuzzAppendRawJSON(f *testing.F) {
	for _, s := range []string{`{"a": 1}`, `[1, "x y", {"b": "\" "}]`, "\"\u2028\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if !json.Valid([]byte(raw)) {
			t.Skip("stored values are valid JSON")
		}
		var want bytes.Buffer
		require.NoError(t, json.Compact(&want, []byte(raw)))
		require.Equal(t, want.String(), string(appendRawJSON(nil, json.RawMessage(raw), nil)))
	})
}
