package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A handler whose context a halt cancelled returns at once; the runner must
// then already see the halt, or it reports the outcome of a task it lost
// (seen under load: a lost task's failure sent, and refused as lease-lost).
func TestAHaltIsVisibleBeforeTheHandlersContextEnds(t *testing.T) {
	t.Parallel()
	for i := range 10000 {
		ctx, cancel := context.WithCancelCause(context.Background())
		j := &job{cancel: cancel, stop: make(chan struct{})}
		seen := make(chan error)
		go func() {
			<-ctx.Done()
			seen <- j.halted()
		}()
		j.halt(ErrTaskLost)
		if err := <-seen; err != ErrTaskLost {
			t.Fatalf("run %d: the handler's context ended before the halt was visible (halted() = %v)", i, err)
		}
	}
}

// A server older than reports on claims answers a claim that carries one
// as malformed (an unknown field): the runner sends that report on its own
// and carries no more, so every outcome still arrives, each once.
func TestRunnerStopsCarryingReportsForAServerWithoutThem(t *testing.T) {
	t.Parallel()
	var (
		mu        sync.Mutex
		pending   = []string{"t1", "t2", "t3"}
		carrying  int      // claims that carried reports
		completed []string // completes on their own, by task
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tasks/v1/claim", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		defer mu.Unlock()
		for _, field := range []string{"complete", "fail"} {
			if _, ok := body[field]; ok {
				carrying++
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusBadRequest)
				_ = json.NewEncoder(w).Encode(Problem{Type: ProblemMalformedRequest, Title: "Malformed request", Status: http.StatusBadRequest,
					Detail: fmt.Sprintf("unknown field %q", field), Errors: []FieldError{{Field: field, Message: "is not a known field"}}})
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if len(pending) == 0 {
			_, _ = io.WriteString(w, `{"tasks":[]}`)
			return
		}
		id := pending[0]
		pending = pending[1:]
		_, _ = fmt.Fprintf(w, `{"tasks":[{"id":%q,"queue":"q","status":"RUNNING","lease_id":"lease-%s","payload":null}]}`, id, id)
	})
	mux.HandleFunc("POST /tasks/v1/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		completed = append(completed, r.PathValue("id"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"id":%q,"status":"DONE"}`, r.PathValue("id"))
	})
	mux.HandleFunc("POST /workers/v1/w/heartbeat", func(w http.ResponseWriter, r *http.Request) { heartbeatAnswered(w) })
	c := fakeServer(t, mux)
	var logs bytes.Buffer
	var logMu sync.Mutex
	r, err := NewRunner(c, RunnerConfig{
		WorkerID: "w", ClaimWait: -1, PollInterval: 5 * time.Millisecond, MaxIdleInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil)),
	}, func(context.Context, Task) (any, error) { return "ok", nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(completed)
		mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the completes did not all arrive: %d of 3", n)
		}
		time.Sleep(5 * time.Millisecond) // polling, with a deadline
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if carrying != 1 {
		t.Errorf("%d claims carried reports; want the first only", carrying)
	}
	if want := []string{"t1", "t2", "t3"}; !slices.Equal(completed, want) {
		t.Errorf("completes on their own: %v; want %v, each once", completed, want)
	}
	logMu.Lock()
	defer logMu.Unlock()
	if n := strings.Count(logs.String(), "the server takes no reports on claims"); n != 1 {
		t.Errorf("the fallback was logged %d times; want once:\n%s", n, logs.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Only a server that does not know heartbeats' task lists (400 naming
// "tasks") turns the runner to plain heartbeats, which renew no lease: a
// 400 that names no field (a proxy's, say) is a failed heartbeat like any
// other, and the next one lists the tasks again.
func TestRunnerGoesToPlainHeartbeatsOnlyForAServerWithoutTaskLists(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		errors    []FieldError
		wantPlain bool
	}{
		{"a 400 naming no field", nil, false},
		{"a 400 naming tasks", []FieldError{{Field: "tasks", Message: "is not a known field"}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu      sync.Mutex
				beats   []bool // per heartbeat: did it list tasks
				claimed bool
			)
			release := make(chan struct{})
			mux := http.NewServeMux()
			mux.HandleFunc("POST /tasks/v1/claim", func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				first := !claimed
				claimed = true
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if !first {
					_, _ = io.WriteString(w, `{"tasks":[]}`)
					return
				}
				_, _ = io.WriteString(w, `{"tasks":[{"id":"t1","queue":"q","status":"RUNNING","lease_id":"l1","payload":null}]}`)
			})
			mux.HandleFunc("POST /tasks/v1/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"t1","status":"DONE"}`)
			})
			mux.HandleFunc("POST /workers/v1/w/heartbeat", func(w http.ResponseWriter, r *http.Request) {
				var body map[string]json.RawMessage
				_ = json.NewDecoder(r.Body).Decode(&body)
				_, listed := body["tasks"]
				mu.Lock()
				n := len(beats)
				if claimed { // the heartbeats from when the task is held
					beats = append(beats, listed)
					n++
				}
				mu.Unlock()
				if n == 1 {
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusBadRequest)
					_ = json.NewEncoder(w).Encode(Problem{Type: ProblemMalformedRequest, Title: "Malformed request",
						Status: http.StatusBadRequest, Errors: c.errors})
					return
				}
				if n == 3 {
					close(release)
				}
				heartbeatAnswered(w)
			})
			cl := fakeServer(t, mux)
			r, err := NewRunner(cl, RunnerConfig{
				WorkerID: "w", ClaimWait: -1, PollInterval: 5 * time.Millisecond, MaxIdleInterval: 20 * time.Millisecond,
				HeartbeatInterval: 10 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
			}, func(ctx context.Context, _ Task) (any, error) {
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
				return "ok", nil
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			select {
			case <-release:
			case <-time.After(10 * time.Second):
				t.Fatal("three heartbeats did not come")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := !beats[2]; got != c.wantPlain {
				t.Errorf("the third heartbeat listed tasks: %v; want plain heartbeats %v (every heartbeat: %v)", beats[2], c.wantPlain, beats)
			}
		})
	}
}

// fakeServer serves mux, with worker "w"'s registration added, until the
// test ends, and returns a client of it.
func fakeServer(t *testing.T, mux *http.ServeMux) *Client {
	t.Helper()
	mux.HandleFunc("POST /workers/v1/register", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","heartbeat_interval_seconds":10}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// heartbeatAnswered answers a heartbeat of worker "w": nothing lost,
// nothing cancelled.
func heartbeatAnswered(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","lost":[],"cancel":[],"drain":false}`)
}
