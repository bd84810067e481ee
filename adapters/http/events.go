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

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// eventsReadLimit is how many outbox messages one read of an event stream
// takes at most.
const eventsReadLimit = 100

// defaultEventsHeartbeat is the keep-alive interval when none is configured.
const defaultEventsHeartbeat = 15 * time.Second

// eventsRetryMillis is the reconnection delay the stream asks clients for.
const eventsRetryMillis = 2000

// StreamLostType is the type of the notice an event stream sends when events
// after the client's position were deleted before it could read them.
const StreamLostType = "stream.events_lost"

// eventFilter selects the events a stream sends.
type eventFilter struct {
	queues []string
	types  []string // exact types, or prefixes ending in "*" ("task.*")
}

// eventFilterOf reads the repeatable, comma-separated queue and type
// parameters.
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
	return f, v.Err()
}

// match reports whether e passes the filter. A worker event matches a queue
// when the worker serves it: it lists the queue, or lists none (any queue).
func (f eventFilter) match(e event.Event) bool {
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

// lostNotice is the data of a stream.events_lost message.
type lostNotice struct {
	Type string `json:"type"`
	// After is the position the stream read from.
	After string `json:"after"`
	// LostThrough is the position of the last deleted event.
	LostThrough string `json:"lost_through"`
}

// handleEvents streams lifecycle events as Server-Sent Events: each event is
// a message whose id is its outbox position and whose data is the event's
// JSON. A client that reconnects with Last-Event-ID resumes right after that
// event; without it the stream starts at the newest event. Comments keep
// proxies from closing an idle stream, and carry the stream's position as an
// id when filtering skipped events, so a resuming client does not re-scan
// them. The stream ends when the client goes away or the server stops.
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
	cursor := strings.TrimSpace(r.Header.Get("Last-Event-ID"))
	if cursor == "" {
		if cursor, err = s.events.Tail(ctx); err != nil {
			writeError(w, r, err)
			return
		}
	}
	page, err := s.events.Read(ctx, cursor, eventsReadLimit)
	if errors.Is(err, ports.ErrInvalidCursor) {
		writeError(w, r, &requestError{
			kind:   kindMalformed,
			detail: "Last-Event-ID is not an event id of this stream",
			fields: []validation.FieldError{{Field: "Last-Event-ID", Message: "is not an event id of this stream"}},
		})
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}

	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // the server's write timeout would cut the stream
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	heartbeat := s.cfg.EventsHeartbeat
	if heartbeat <= 0 {
		heartbeat = defaultEventsHeartbeat
	}
	stopping := s.stoppingSignal()
	st := &sseStream{w: w, rc: rc}
	st.printf("retry: %d\n\n", eventsRetryMillis)
	lastID, lastLost := cursor, ""
	for {
		if page.Lost != "" && page.Lost != lastLost {
			lastLost = page.Lost
			data, _ := json.Marshal(lostNotice{Type: StreamLostType, After: cursor, LostThrough: page.Lost})
			st.printf("data: %s\n\n", data)
		}
		for _, fe := range page.Events {
			if !filter.match(fe.Event) || !principal.SeesEvent(fe.Event) {
				continue
			}
			data, err := json.Marshal(fe.Event)
			if err != nil {
				continue
			}
			st.printf("id: %s\ndata: %s\n\n", fe.ID, data)
			lastID = fe.ID
		}
		cursor = page.Next
		if !page.More {
			if time.Since(st.lastWrite) >= heartbeat {
				if cursor != lastID {
					st.printf("id: %s\n", cursor)
					lastID = cursor
				}
				st.printf(": heartbeat\n\n")
			}
			if err := st.flush(); err != nil {
				return
			}
			wait := time.NewTimer(s.events.PollInterval())
			select {
			case <-ctx.Done():
				wait.Stop()
				return
			case <-stopping:
				wait.Stop()
				return
			case <-wait.C:
			}
			if !s.keyStillWorks(r) { // revoked or expired while streaming
				return
			}
		} else {
			if err := st.flush(); err != nil {
				return
			}
			select { // catching up: read on at once, unless stopping
			case <-ctx.Done():
				return
			case <-stopping:
				return
			default:
			}
		}
		if page, err = s.events.Read(ctx, cursor, eventsReadLimit); err != nil {
			if ctx.Err() == nil {
				loggerFrom(ctx).Warn("event stream read failed; closing the stream", zap.Error(err))
			}
			return // the client reconnects with its Last-Event-ID
		}
	}
}

// sseStream writes to an event stream, remembering the first write error.
type sseStream struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	err       error
	pending   bool
	lastWrite time.Time
}

func (s *sseStream) printf(format string, args ...any) {
	if s.err != nil {
		return
	}
	_, s.err = fmt.Fprintf(s.w, format, args...)
	s.pending = true
	s.lastWrite = time.Now()
}

// flush sends what was written and returns the first write error (the client
// went away).
func (s *sseStream) flush() error {
	if s.err == nil && s.pending {
		s.err = s.rc.Flush()
		s.pending = false
	}
	return s.err
}
