package sdks_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/spectest"
)

// faultProxy stands between an SDK and the server and does to the SDK what
// networks and servers do: it loses the answers of claims the server
// committed, answers with an outage (503) or throttling (429) with
// Retry-After for a while, and partitions (holds every request unanswered,
// then cuts it). The SDKs' tests arm it over HTTP (/_faults/...) and read
// what it saw, so the same adversities hold every language's runner.
//
// Control routes (JSON bodies):
//
//	POST /_faults/lose-claim-answers {"count": n}    cut the connection instead of
//	     answering the next n claims whose answer carries tasks (the server committed them)
//	POST /_faults/answer {"path_suffix": "/complete", "status": 503, "retry_after": 1, "ms": 4000}
//	     answer requests whose path ends so ("": every request) with that status, without
//	     forwarding them, for ms milliseconds
//	POST /_faults/partition {"ms": 5000}             hold every request unanswered for ms, then cut it
//	POST /_faults/reset                               disarm everything
//	GET  /_faults/log                                 {"claims": [...], "reports": [...]}
type faultProxy struct {
	target *url.URL
	hc     *http.Client
	stream *httputil.ReverseProxy

	mu             sync.Mutex
	loseClaims     int
	answers        []cannedAnswer
	partitionUntil time.Time
	claims         []claimRecord
	reports        []reportRecord
}

type cannedAnswer struct {
	PathSuffix string `json:"path_suffix"`
	Status     int    `json:"status"`
	RetryAfter int    `json:"retry_after"`
	MS         int    `json:"ms"`
	until      time.Time
}

// claimRecord is one claim the proxy forwarded.
type claimRecord struct {
	RequestID string   `json:"request_id"`
	WorkerID  string   `json:"worker_id"`
	Status    int      `json:"status"`
	TaskIDs   []string `json:"task_ids"`
	// Lost: the server answered, the proxy cut the connection instead.
	Lost bool `json:"lost"`
}

// reportRecord is one request about a held task (complete, fail, snooze,
// release, extend), forwarded or answered by a fault.
type reportRecord struct {
	TaskID  string `json:"task_id"`
	Action  string `json:"action"`
	LeaseID string `json:"lease_id"`
	Status  int    `json:"status"`
	// Faulted: the proxy answered it; the server never saw it.
	Faulted bool `json:"faulted"`
}

// newFaultProxy returns a proxy to the server at target whose every
// exchange (but event streams) is validated against docs/openapi.yaml: a
// request an SDK sends that the server accepts must be one the description
// allows, and every answer must match it.
func newFaultProxy(t testing.TB, target string) *faultProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // event streams flow through at once
	validator := spectest.New(t, target)
	return &faultProxy{
		target: u,
		// No timeout: long polls take their wait; the SDK bounds its calls.
		hc:     &http.Client{Transport: validator.Transport(&http.Transport{MaxIdleConnsPerHost: 64})},
		stream: rp,
	}
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_faults/") {
		p.control(w, r)
		return
	}
	if r.URL.Path == "/events/v1" {
		p.stream.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		cut(w)
		return
	}
	if until := p.partitioned(); !until.IsZero() {
		select {
		case <-time.After(time.Until(until)):
		case <-r.Context().Done():
		}
		cut(w)
		return
	}
	action, taskID := reportOf(r)
	if a, ok := p.canned(r.URL.Path); ok {
		if action != "" {
			p.record(reportRecord{TaskID: taskID, Action: action, LeaseID: leaseOf(body), Status: a.Status, Faulted: true})
		}
		if a.RetryAfter > 0 {
			w.Header().Set("Retry-After", itoa(a.RetryAfter))
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(a.Status)
		typ := "about:blank"
		if slug, ok := cannedSlugs[a.Status]; ok {
			typ = "urn:problem-type:taskmaster:" + slug
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"type": typ, "title": http.StatusText(a.Status), "status": a.Status, "detail": "injected by the test's fault proxy",
		})
		return
	}

	out, err := http.NewRequestWithContext(r.Context(), r.Method, p.target.String()+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		cut(w)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := p.hc.Do(out)
	if err != nil {
		cut(w)
		return
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		cut(w)
		return
	}
	switch {
	case r.URL.Path == "/tasks/v1/claim":
		var req struct {
			RequestID string `json:"request_id"`
			WorkerID  string `json:"worker_id"`
		}
		_ = json.Unmarshal(body, &req)
		var got struct {
			Tasks []struct {
				ID string `json:"id"`
			} `json:"tasks"`
		}
		_ = json.Unmarshal(answer, &got)
		rec := claimRecord{RequestID: req.RequestID, WorkerID: req.WorkerID, Status: resp.StatusCode, TaskIDs: []string{}}
		for _, t := range got.Tasks {
			rec.TaskIDs = append(rec.TaskIDs, t.ID)
		}
		p.mu.Lock()
		rec.Lost = resp.StatusCode == http.StatusOK && len(rec.TaskIDs) > 0 && p.loseClaims > 0
		if rec.Lost {
			p.loseClaims--
		}
		p.claims = append(p.claims, rec)
		p.mu.Unlock()
		if rec.Lost {
			cut(w)
			return
		}
	case action != "":
		p.record(reportRecord{TaskID: taskID, Action: action, LeaseID: leaseOf(body), Status: resp.StatusCode})
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func (p *faultProxy) control(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Count int `json:"count"`
		MS    int `json:"ms"`
		cannedAnswer
	}
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.Method + " " + strings.TrimPrefix(r.URL.Path, "/_faults") {
	case "POST /lose-claim-answers":
		p.loseClaims = in.Count
	case "POST /answer":
		a := in.cannedAnswer
		a.MS = in.MS
		a.until = time.Now().Add(time.Duration(in.MS) * time.Millisecond)
		p.answers = append(p.answers, a)
	case "POST /partition":
		p.partitionUntil = time.Now().Add(time.Duration(in.MS) * time.Millisecond)
	case "POST /reset":
		p.loseClaims, p.answers, p.partitionUntil = 0, nil, time.Time{}
	case "GET /log":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"claims": nonNil(p.claims), "reports": nonNil(p.reports)})
		return
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// cannedSlugs are the problem types of the statuses the proxy answers with
// (others go out as about:blank, as from a proxy that is not ours).
var cannedSlugs = map[int]string{
	http.StatusUnauthorized:        "unauthorized",
	http.StatusForbidden:           "forbidden",
	http.StatusTooManyRequests:     "rate-limited",
	http.StatusServiceUnavailable:  "unavailable",
	http.StatusInternalServerError: "internal-error",
}

func (p *faultProxy) partitioned() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.partitionUntil) {
		return p.partitionUntil
	}
	return time.Time{}
}

func (p *faultProxy) canned(path string) (cannedAnswer, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, a := range p.answers {
		if now.Before(a.until) && strings.HasSuffix(path, a.PathSuffix) {
			return a, true
		}
	}
	return cannedAnswer{}, false
}

func (p *faultProxy) record(r reportRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reports = append(p.reports, r)
}

// log returns what the proxy saw.
func (p *faultProxy) log() ([]claimRecord, []reportRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]claimRecord(nil), p.claims...), append([]reportRecord(nil), p.reports...)
}

// reportOf names the held-task action of a request (POST
// /tasks/v1/{id}/{action}), or "".
func reportOf(r *http.Request) (action, taskID string) {
	if r.Method != http.MethodPost {
		return "", ""
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/tasks/v1/"), "/")
	if len(parts) != 2 {
		return "", ""
	}
	switch parts[1] {
	case "complete", "fail", "snooze", "release", "extend":
		return parts[1], parts[0]
	}
	return "", ""
}

func leaseOf(body []byte) string {
	var b struct {
		LeaseID string `json:"lease_id"`
	}
	_ = json.Unmarshal(body, &b)
	return b.LeaseID
}

// cut ends the exchange without an answer, as a lost connection would.
func cut(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func itoa(n int) string { return strconv.Itoa(n) }

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
