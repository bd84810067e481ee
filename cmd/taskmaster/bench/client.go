package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// api is a lean HTTP client for the benchmark: it decodes only what the
// benchmark needs, so the client's own cost stays small next to the
// server's. A request the server refuses with 503 (its in-flight caps) is
// repeated after the answer's Retry-After, and counted.
type api struct {
	base string
	hc   *http.Client
	// refused counts the 503 answers that were waited out.
	refused atomic.Int64
	// key, when set, is sent as the bearer token of every request.
	key string
}

func newAPI(base string, conns int) *api {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns * 2,
		MaxIdleConnsPerHost: conns * 2,
		MaxConnsPerHost:     0,
		IdleConnTimeout:     90 * time.Second,
	}
	return &api{base: base, hc: &http.Client{Transport: tr, Timeout: 60 * time.Second}}
}

type claimedTask struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

type submitItem struct {
	Queue    string          `json:"queue"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	GroupKey string          `json:"group_key,omitempty"`
}

func (a *api) post(ctx context.Context, path string, body any, out any) (int, error) {
	return a.send(ctx, http.MethodPost, path, body, out)
}

// send sends body (JSON) with method to path, decoding a 2xx answer into
// out; a 503 is repeated after its Retry-After.
func (a *api) send(ctx context.Context, method, path string, body any, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	for {
		code, wait, err := a.sendOnce(ctx, method, path, b, out)
		if code != http.StatusServiceUnavailable || wait == 0 {
			return code, err
		}
		a.refused.Add(1)
		select {
		case <-ctx.Done():
			return code, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// sendOnce sends one request; for a 503 it returns the answer's
// Retry-After (0 without one).
func (a *api) sendOnce(ctx context.Context, method, path string, b []byte, out any) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	a.authorize(req)
	resp, err := a.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		var wait time.Duration
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			wait = time.Duration(s) * time.Second
		}
		return resp.StatusCode, wait, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, msg)
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, 0, err
	}
	return resp.StatusCode, 0, json.NewDecoder(resp.Body).Decode(out)
}

func (a *api) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+path, nil)
	if err != nil {
		return nil, err
	}
	a.authorize(req)
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return b, nil
}

func (a *api) register(ctx context.Context, id string, queues ...string) error {
	_, err := a.post(ctx, "/workers/v1/register", map[string]any{"id": id, "queues": queues}, nil)
	return err
}

func (a *api) submitBatch(ctx context.Context, items []submitItem) error {
	_, err := a.post(ctx, "/tasks/v1/batch", map[string]any{"tasks": items}, nil)
	return err
}

func (a *api) submit(ctx context.Context, item submitItem) error {
	_, err := a.post(ctx, "/tasks/v1", item, nil)
	return err
}

func (a *api) claim(ctx context.Context, worker, queue string, limit int, waitMS int) ([]claimedTask, error) {
	var out struct {
		Tasks []claimedTask `json:"tasks"`
	}
	_, err := a.post(ctx, "/tasks/v1/claim", map[string]any{"worker_id": worker, "queue": queue, "limit": limit, "wait_ms": waitMS}, &out)
	return out.Tasks, err
}

// claimReporting claims up to limit tasks, carrying the completions of
// done: every one must come back done.
func (a *api) claimReporting(ctx context.Context, worker, queue string, limit, waitMS int, done []claimedTask) ([]claimedTask, error) {
	items := make([]map[string]any, len(done))
	for i, t := range done {
		items[i] = map[string]any{"id": t.ID, "lease_id": t.LeaseID}
	}
	var out struct {
		Tasks     []claimedTask `json:"tasks"`
		Completed []struct {
			Outcome string `json:"outcome"`
		} `json:"completed"`
	}
	body := map[string]any{"worker_id": worker, "queue": queue, "limit": limit, "wait_ms": waitMS, "complete": items}
	if _, err := a.post(ctx, "/tasks/v1/claim", body, &out); err != nil {
		return nil, err
	}
	if len(out.Completed) != len(done) {
		return nil, fmt.Errorf("claim: %d reports came back with %d outcomes", len(done), len(out.Completed))
	}
	for _, it := range out.Completed {
		if it.Outcome != "done" {
			return nil, fmt.Errorf("claim: a report came back %q", it.Outcome)
		}
	}
	return out.Tasks, nil
}

func (a *api) completeBatch(ctx context.Context, worker string, tasks []claimedTask) error {
	items := make([]map[string]any, len(tasks))
	for i, t := range tasks {
		items[i] = map[string]any{"id": t.ID, "lease_id": t.LeaseID}
	}
	var out struct {
		Items []struct {
			Outcome string `json:"outcome"`
		} `json:"items"`
	}
	if _, err := a.post(ctx, "/tasks/v1/complete", map[string]any{"worker_id": worker, "items": items}, &out); err != nil {
		return err
	}
	for _, it := range out.Items {
		if it.Outcome != "done" {
			return fmt.Errorf("complete batch: an item came back %q", it.Outcome)
		}
	}
	return nil
}

func (a *api) complete(ctx context.Context, worker string, t claimedTask) error {
	_, err := a.post(ctx, "/tasks/v1/"+t.ID+"/complete", map[string]any{"worker_id": worker, "lease_id": t.LeaseID}, nil)
	return err
}

func (a *api) authorize(req *http.Request) {
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
}
