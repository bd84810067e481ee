package crash_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/binary"
)

// A server killed (SIGKILL) in the middle of a push delivery loses no task:
// once the delivery's lease runs out (timeout_seconds plus the lease
// margin), another instance delivers it again, with the same task id and
// the next attempt number. The endpoint sees the task twice: delivery is at
// least once, and Taskmaster-Task-Id is what it deduplicates on.
func TestPushDeliverySurvivesAKilledServer(t *testing.T) {
	t.Parallel()
	type delivery struct {
		taskID, attempt string
		at              time.Time
	}
	var (
		mu       sync.Mutex
		got      []delivery
		firstGot = make(chan struct{})
	)
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, delivery{r.Header.Get("Taskmaster-Task-Id"), r.Header.Get("Taskmaster-Attempt"), time.Now()})
		n := len(got)
		mu.Unlock()
		if n == 1 {
			close(firstGot)
			<-r.Context().Done() // the first delivery hangs until its server dies
			return
		}
		_, _ = io.WriteString(w, `{"delivered":true}`)
	}))
	defer ep.Close()

	dbURL := pgtest.NewDatabase(t)
	bin := binary.Build(t)
	env := []string{
		"TASKMASTER_DATABASE_URL=" + dbURL,
		"TASKMASTER_PUSH_ALLOWED_HOSTS=127.0.0.1",
		"TASKMASTER_PUSH_REFRESH_MS=50",
		"TASKMASTER_PUSH_LEASE_MARGIN_SECONDS=1",
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS=100",
		"TASKMASTER_CLAIM_POLL_INTERVAL_MS=50",
		"TASKMASTER_RETENTION_TTL=0",
		"TASKMASTER_PUSH_SECRET_KEYS=" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)),
	}
	first := binary.Serve(t, bin, env...)
	call := func(p *binary.Process, method, path string, body any, out any) {
		t.Helper()
		var buf bytes.Buffer
		require.NoError(t, json.NewEncoder(&buf).Encode(body))
		req, err := http.NewRequest(method, p.URL+path, &buf)
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Less(t, resp.StatusCode, 300, "%s %s: %s", method, path, b)
		if out != nil {
			require.NoError(t, json.Unmarshal(b, out))
		}
	}
	call(first, http.MethodPatch, "/queues/v1/hooks", map[string]any{"push": map[string]any{"url": ep.URL, "timeout_seconds": 2}}, nil)
	var tk struct {
		ID     string          `json:"id"`
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
	}
	call(first, http.MethodPost, "/tasks/v1", map[string]any{"queue": "hooks", "payload": map[string]any{"n": 1}}, &tk)
	select {
	case <-firstGot:
	case <-time.After(60 * time.Second):
		t.Fatal("the first delivery never came")
	}
	first.Signal(t, syscall.SIGKILL)
	first.Stop(t) // waits for it to be gone

	second := binary.Serve(t, bin, env...)
	deadline := time.Now().Add(60 * time.Second)
	for tk.Status != "DONE" {
		require.False(t, time.Now().After(deadline), "the task was not delivered again: %+v", tk)
		time.Sleep(50 * time.Millisecond)
		call(second, http.MethodGet, "/tasks/v1/"+tk.ID, nil, &tk)
	}
	require.JSONEq(t, `{"delivered":true}`, string(tk.Result))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	require.Equal(t, tk.ID, got[0].taskID)
	require.Equal(t, tk.ID, got[1].taskID, "the same task id: the endpoint can deduplicate")
	require.Equal(t, []string{"1", "2"}, []string{got[0].attempt, got[1].attempt})
	require.GreaterOrEqual(t, got[1].at.Sub(got[0].at), 2*time.Second, "delivered again once the lease ran out, not before")
	var attempts struct {
		Attempts []struct {
			Outcome    string `json:"outcome"`
			HTTPStatus *int   `json:"http_status"`
		} `json:"attempts"`
	}
	call(second, http.MethodGet, "/tasks/v1/"+tk.ID+"/attempts", nil, &attempts)
	require.Len(t, attempts.Attempts, 2)
	require.Equal(t, "lease_expired", attempts.Attempts[0].Outcome)
	require.Nil(t, attempts.Attempts[0].HTTPStatus)
	require.Equal(t, "completed", attempts.Attempts[1].Outcome)
	require.Equal(t, 200, *attempts.Attempts[1].HTTPStatus)
}
