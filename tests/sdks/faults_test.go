package sdks_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/taskmaster/taskmaster/tests/faultproxy"
	"github.com/taskmaster/taskmaster/tests/spectest"
)

// faults puts tests/faultproxy between an SDK and the server, and lets the
// SDK's own tests (Python, TypeScript: other processes) drive it over HTTP:
//
//	SDK ──► faultproxy (faults on command) ──► recorder (validates against
//	        docs/openapi.yaml, logs claims and reports) ──► server
//
// The recorder stands behind the proxy so that it sees what reached the
// server, the answers the proxy then dropped included.
//
// Control routes (JSON bodies; "on" names routes: register, heartbeat,
// claim, complete, fail, extend, snooze, release, reports; absent: every
// request):
//
//	POST /lose-claim-answers {"count": n}                 the next n claims reach the server, their answers are cut
//	POST /answer {"on": [...], "status": 503, "retry_after": 1, "ms": 4000}
//	                                                      answer with that status (and Retry-After), without forwarding, for ms
//	POST /partition {"ms": 5000}                          hold every request unanswered for ms, then cut it
//	POST /reset                                           remove every fault
//	GET  /log                                             {"claims": [...], "reports": [...]}
type faults struct {
	proxy   *faultproxy.Proxy
	rec     *recorder
	control *httptest.Server
}

func startFaults(t testing.TB, server string) *faults {
	t.Helper()
	rec := &recorder{hc: &http.Client{Transport: spectest.New(t, server).Transport(&http.Transport{MaxIdleConnsPerHost: 64})}, target: server}
	inner := httptest.NewServer(rec)
	t.Cleanup(inner.Close)
	f := &faults{proxy: faultproxy.Start(t, inner.URL), rec: rec}
	f.control = httptest.NewServer(http.HandlerFunc(f.serveControl))
	t.Cleanup(f.control.Close)
	return f
}

var routeNames = map[string][]string{
	"register":  {faultproxy.Register},
	"heartbeat": {faultproxy.Heartbeat},
	"claim":     {faultproxy.Claim},
	"complete":  {faultproxy.Complete, faultproxy.CompleteBatch},
	"fail":      {faultproxy.Fail, faultproxy.FailBatch},
	"extend":    {faultproxy.Extend},
	"snooze":    {faultproxy.Snooze},
	"release":   {faultproxy.Release, faultproxy.ReleaseBatch},
	"reports":   faultproxy.Reports,
}

func (f *faults) serveControl(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Count      int      `json:"count"`
		MS         int      `json:"ms"`
		On         []string `json:"on"`
		Status     int      `json:"status"`
		RetryAfter float64  `json:"retry_after"`
	}
	if r.Method == http.MethodPost && r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	var routes []string
	for _, name := range in.On {
		rs, ok := routeNames[name]
		if !ok {
			http.Error(w, "unknown route name "+name, http.StatusBadRequest)
			return
		}
		routes = append(routes, rs...)
	}
	d := time.Duration(in.MS) * time.Millisecond
	switch r.Method + " " + r.URL.Path {
	case "POST /lose-claim-answers":
		f.proxy.Inject(faultproxy.DropAnswers().On(faultproxy.Claim).Times(in.Count))
	case "POST /answer":
		f.proxy.Inject(faultproxy.Status(in.Status, time.Duration(in.RetryAfter*float64(time.Second))).On(routes...).For(d))
	case "POST /partition":
		f.proxy.Inject(faultproxy.Hang().On(routes...).For(d))
	case "POST /reset":
		f.proxy.Heal()
	case "GET /log":
		claims, reports := f.log()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"claims": claims, "reports": reports})
		return
	default:
		http.NotFound(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// claimRecord is one claim that reached the server.
type claimRecord struct {
	RequestID string   `json:"request_id"`
	WorkerID  string   `json:"worker_id"`
	Status    int      `json:"status"`
	TaskIDs   []string `json:"task_ids"`
	// Lost: the SDK sent the claim again with its request id, so this
	// answer did not reach it.
	Lost bool `json:"lost"`
}

// reportRecord is one request about a held task (complete, fail, snooze,
// release, extend): one that reached the server, or one the proxy answered
// or held itself (Faulted; its lease is not known then).
type reportRecord struct {
	TaskID  string `json:"task_id"`
	Action  string `json:"action"`
	LeaseID string `json:"lease_id"`
	Status  int    `json:"status"`
	Faulted bool   `json:"faulted"`
}

// log returns the claims that reached the server and every report, in
// order.
func (f *faults) log() ([]claimRecord, []reportRecord) {
	claims, reports := f.rec.log()
	seen := map[string]int{}
	for i := len(claims) - 1; i >= 0; i-- {
		if seen[claims[i].RequestID] > 0 {
			claims[i].Lost = true
		}
		seen[claims[i].RequestID]++
	}
	for _, e := range f.proxy.Log() {
		if e.Action == faultproxy.ActionForward || e.Action == faultproxy.ActionDrop {
			continue // the recorder saw it
		}
		if action, id := reportOf(e.Method, e.Path); action != "" {
			reports = append(reports, reportRecord{TaskID: id, Action: action, Status: e.Status, Faulted: true})
		}
	}
	return claims, reports
}

// recorder forwards to the server, validating every exchange but event
// streams against docs/openapi.yaml (a request an SDK sends that the
// server accepts must be one the description allows, every answer must
// match it), and logs claims and reports with what they carried.
type recorder struct {
	hc     *http.Client
	target string

	mu      sync.Mutex
	claims  []claimRecord
	reports []reportRecord
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	var rd io.Reader // none for a request without a body: it must go out with no body (and so no Content-Type)
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, rec.target+r.URL.RequestURI(), rd)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	if r.URL.Path == "/events/v1" {
		rec.stream(w, out)
		return
	}
	resp, err := rec.hc.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if r.URL.Path == "/tasks/v1/claim" {
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
		c := claimRecord{RequestID: req.RequestID, WorkerID: req.WorkerID, Status: resp.StatusCode, TaskIDs: []string{}}
		for _, t := range got.Tasks {
			c.TaskIDs = append(c.TaskIDs, t.ID)
		}
		rec.mu.Lock()
		rec.claims = append(rec.claims, c)
		rec.mu.Unlock()
	} else if action, id := reportOf(r.Method, r.URL.Path); action != "" {
		var b struct {
			LeaseID string `json:"lease_id"`
		}
		_ = json.Unmarshal(body, &b)
		rec.mu.Lock()
		rec.reports = append(rec.reports, reportRecord{TaskID: id, Action: action, LeaseID: b.LeaseID, Status: resp.StatusCode})
		rec.mu.Unlock()
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// stream passes an event stream through as it comes.
func (rec *recorder) stream(w http.ResponseWriter, out *http.Request) {
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

func (rec *recorder) log() ([]claimRecord, []reportRecord) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]claimRecord{}, rec.claims...), append([]reportRecord{}, rec.reports...)
}

// reportOf names the held-task action of a request (POST
// /tasks/v1/{id}/{action}), or "".
func reportOf(method, path string) (action, taskID string) {
	if method != http.MethodPost {
		return "", ""
	}
	parts := strings.Split(strings.TrimPrefix(path, "/tasks/v1/"), "/")
	if len(parts) != 2 {
		return "", ""
	}
	switch parts[1] {
	case "complete", "fail", "snooze", "release", "extend":
		return parts[1], parts[0]
	}
	return "", ""
}
