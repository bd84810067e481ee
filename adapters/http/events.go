package http

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// defaultEventsHeartbeat is the keep-alive interval when none is configured.
const defaultEventsHeartbeat = 15 * time.Second

// eventsRetryMillis is the reconnection delay the stream asks clients for.
const eventsRetryMillis = 2000

// defaultEventsWriteTimeout bounds one write to a stream's client when
// none is configured: a client that stops reading ends its stream instead of
// holding its handler.
const defaultEventsWriteTimeout = 10 * time.Second

// keyRecheckInterval is how often a stream served under an API key checks
// that the key still works: a revoked or expired key's streams end within
// about a second, like its requests.
const keyRecheckInterval = time.Second

// StreamLostType is the type of the notice an event stream sends when events
// after the client's position were deleted before it could read them.
const StreamLostType = "stream.events_lost"

// StreamDroppedType is the type of the last message of a stream whose
// client read too slowly: it says where to resume.
const StreamDroppedType = "stream.dropped"

// eventFilter selects the events a stream sends.
type eventFilter struct {
	queues []string
	types  []string // exact types, or prefixes ending in "*" ("task.*")
	// tasks, when not empty, are the tasks whose events the stream sends
	// (by id, lowercase).
	tasks []string
	// workflows, when not empty, are the runs whose events the stream
	// sends: their tasks' and their audit events (by id, lowercase).
	workflows []string
}

// MaxStreamTasks is the most task_id values one stream follows.
const MaxStreamTasks = 100

// eventFilterOf reads the repeatable, comma-separated queue, type,
// task_id and workflow_id parameters.
func eventFilterOf(q url.Values) (eventFilter, error) {
	var f eventFilter
	var v validation.Errors
	split := func(name string) []string {
		var out []string
		for _, raw := range q[name] {
			for _, s := range strings.Split(raw, ",") {
				if s = strings.TrimSpace(s); s == "" {
					v.Add(name, "must not be empty")
					continue
				}
				out = append(out, s)
			}
		}
		return out
	}
	f.queues, f.types = split("queue"), split("type")
	for _, q := range f.queues {
		task.CheckQueue(&v, "queue", q)
	}
	for _, raw := range split("task_id") {
		id, err := uuid.Parse(raw)
		if err != nil {
			v.Add("task_id", fmt.Sprintf("%q is not a task id", raw))
			continue
		}
		if s := id.String(); !slices.Contains(f.tasks, s) {
			f.tasks = append(f.tasks, s)
		}
	}
	if len(f.tasks) > MaxStreamTasks {
		v.Add("task_id", fmt.Sprintf("must name at most %d tasks", MaxStreamTasks))
	}
	for _, raw := range split("workflow_id") {
		id, err := uuid.Parse(raw)
		if err != nil {
			v.Add("workflow_id", fmt.Sprintf("%q is not a workflow id", raw))
			continue
		}
		if s := id.String(); !slices.Contains(f.workflows, s) {
			f.workflows = append(f.workflows, s)
		}
	}
	if len(f.workflows) > MaxStreamTasks {
		v.Add("workflow_id", fmt.Sprintf("must name at most %d workflows", MaxStreamTasks))
	}
	return f, v.Err()
}

// match reports whether e passes the filter. A worker event matches a queue
// when the worker serves it: it lists the queue, or lists none (any queue).
func (f eventFilter) match(e ports.FeedEvent) bool {
	if len(f.tasks) > 0 && !slices.Contains(f.tasks, e.TaskID) {
		return false
	}
	if len(f.workflows) > 0 && !f.inWorkflow(e) {
		return false
	}
	if len(f.types) > 0 && !slices.ContainsFunc(f.types, func(t string) bool {
		if prefix, ok := strings.CutSuffix(t, "*"); ok {
			return strings.HasPrefix(string(e.Type), prefix)
		}
		return string(e.Type) == t
	}) {
		return false
	}
	if len(f.queues) == 0 {
		return true
	}
	if e.Queue != "" {
		return slices.Contains(f.queues, e.Queue)
	}
	if strings.HasPrefix(string(e.Type), "worker.") {
		return len(e.Queues) == 0 || slices.ContainsFunc(e.Queues, func(q string) bool { return slices.Contains(f.queues, q) })
	}
	return false
}

// inWorkflow reports whether e concerns one of f's runs: it names the run,
// or it is an event of a task that is its own run (such events name none)
// whose id is the run's.
func (f eventFilter) inWorkflow(e ports.FeedEvent) bool {
	if e.WorkflowID != "" {
		return slices.Contains(f.workflows, e.WorkflowID)
	}
	return e.TaskID != "" && slices.Contains(f.workflows, e.TaskID)
}

// lostNotice is the data of a stream.events_lost message.
type lostNotice struct {
	Type string `json:"type"`
	// After is the position the stream read from.
	After string `json:"after"`
	// LostThrough is the position of the last deleted event.
	LostThrough string `json:"lost_through"`
}

// droppedNotice is the data of a stream.dropped message.
type droppedNotice struct {
	Type string `json:"type"`
	// LastEventID is the id of the last event the stream sent: resume
	// after it (browsers send it as Last-Event-ID when they reconnect).
	LastEventID string `json:"last_event_id"`
	Detail      string `json:"detail"`
}

// handleEvents streams lifecycle events as Server-Sent Events: each event is
// a message whose id is its outbox position and whose data is the event's
// JSON. A client that reconnects with Last-Event-ID resumes right after that
// event; without it the stream starts at the newest event. Comments keep
// proxies from closing an idle stream, and carry the stream's position as an
// id when filtering skipped events, so a resuming client does not re-scan
// them. A client too slow to take its events is sent a stream.dropped
// message naming its last event and the stream ends. The stream ends when
// the client goes away or the server stops.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	filter, err := eventFilterOf(r.URL.Query())
	if err != nil {
		writeError(w, r, err)
		return
	}
	// A key limited to some queues sees their events only (auth.go).
	principal := ports.Principal(ctx)
	for _, q := range filter.queues {
		if err := principal.CheckQueue(q); err != nil {
			writeError(w, r, err)
			return
		}
	}
	sub, err := s.events.Subscribe(ctx, strings.TrimSpace(r.Header.Get("Last-Event-ID")))
	switch {
	case errors.Is(err, ports.ErrInvalidCursor):
		writeError(w, r, &requestError{
			kind:   kindMalformed,
			detail: "Last-Event-ID is not an event id of this stream",
			fields: []validation.FieldError{{Field: "Last-Event-ID", Message: "is not an event id of this stream"}},
		})
		return
	case errors.Is(err, ports.ErrTooManyStreams), errors.Is(err, ports.ErrStreamsStopped):
		// Expected under load or on shutdown: answered (with Retry-After,
		// see problem.go), not logged.
		writeProblem(w, r, problemFor(err))
		return
	case err != nil:
		writeError(w, r, err)
		return
	}
	defer sub.Close()

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	heartbeat := s.cfg.EventsHeartbeat
	if heartbeat <= 0 {
		heartbeat = defaultEventsHeartbeat
	}
	beat := time.NewTicker(heartbeat / 2)
	defer beat.Stop()
	recheck := time.NewTicker(keyRecheckInterval)
	defer recheck.Stop()
	stopping := s.stoppingSignal()
	st := &sseStream{w: w, rc: rc, timeout: s.cfg.EventsWriteTimeout}
	if st.timeout <= 0 {
		st.timeout = defaultEventsWriteTimeout
	}
	st.printf("retry: %d\n\n", eventsRetryMillis)
	cursor := sub.Cursor()
	lastID, lastLost := cursor, ""
	ended := func() {
		if errors.Is(sub.Err(), ports.ErrSubscriberTooSlow) {
			data, _ := json.Marshal(droppedNotice{Type: StreamDroppedType, LastEventID: lastID,
				Detail: "the client read the stream too slowly; reconnect with Last-Event-ID " + lastID})
			st.printf("data: %s\n\n", data)
			_ = st.flush()
		}
		// The client reconnects with its Last-Event-ID. (A stream ended by
		// the reader's failure is not logged here: the reader logs it once
		// for all of them.)
	}
	for {
		if err := st.flush(); err != nil {
			return
		}
		select { // an ended stream sends no more of its pages
		case <-sub.Done():
			ended()
			return
		default:
		}
		select {
		case <-ctx.Done():
			return
		case <-stopping:
			return
		case <-sub.Done():
			ended()
			return
		case page := <-sub.Pages():
			if page.Lost != "" && page.Lost != lastLost {
				lastLost = page.Lost
				data, _ := json.Marshal(lostNotice{Type: StreamLostType, After: cursor, LostThrough: page.Lost})
				st.printf("data: %s\n\n", data)
			}
			for _, fe := range page.Events {
				if filter.match(fe) && principal.SeesEvent(event.Event{Type: fe.Type, Queue: fe.Queue, Queues: fe.Queues}) {
					st.printf("id: %s\ndata: %s\n\n", fe.ID, fe.Data)
					lastID = fe.ID
				}
			}
			cursor = page.Next
		case <-recheck.C:
			if !s.keyStillWorks(r) { // revoked or expired while streaming
				return
			}
		case <-beat.C:
			if time.Since(st.lastWrite) >= heartbeat {
				if cursor != lastID {
					st.printf("id: %s\n", cursor)
					lastID = cursor
				}
				st.printf(": heartbeat\n\n")
			}
		}
	}
}

// sseStream writes to an event stream, remembering the first write error.
type sseStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	timeout   time.Duration
	err       error
	pending   bool
	lastWrite time.Time
}

func (s *sseStream) printf(format string, args ...any) {
	if s.err != nil {
		return
	}
	if !s.pending { // once per flush: a write may block until the client reads
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	_, s.err = fmt.Fprintf(s.w, format, args...)
	s.pending = true
	s.lastWrite = time.Now()
}

// flush sends what was written and returns the first write error (the client
// went away, or took longer than the write timeout to take a write).
func (s *sseStream) flush() error {
	if s.err == nil && s.pending {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		s.err = s.rc.Flush()
		s.pending = false
	}
	return s.err
}
