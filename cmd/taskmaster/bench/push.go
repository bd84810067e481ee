package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register("push", runPush) }

// pushEndpointHost is where the scenario's endpoint listens; the server it
// starts allows it (TASKMASTER_PUSH_ALLOWED_HOSTS), a server given with
// --url must too.
const pushEndpointHost = "127.0.0.1"

// PushFigures are the push scenario's: a push queue delivering to a local
// endpoint that answers 200 at once. Burst: n tasks submitted as fast as
// the producers go, delivered as fast as the dispatcher goes (throughput;
// the delivery latency then is mostly queueing). Paced: tasks submitted at
// --rate for --duration, below saturation (the latency a task sees).
// Delivery latency is from the submission (a timestamp in the payload) to
// the endpoint receiving the task.
type PushFigures struct {
	MaxInFlight            int         `json:"max_in_flight"`
	BurstTasks             int         `json:"burst_tasks"`
	BurstTasksPerSec       float64     `json:"burst_delivered_tasks_per_sec"`
	BurstDoneTasksPerSec   float64     `json:"burst_done_tasks_per_sec"`
	BurstDeliveryLatencyMS Percentiles `json:"burst_delivery_latency_ms"`
	PeakInFlight           int64       `json:"peak_in_flight"`
	PacedRate              int         `json:"paced_rate"`
	PacedTasks             int         `json:"paced_tasks"`
	PacedDeliveryLatencyMS Percentiles `json:"paced_delivery_latency_ms"`
}

// pushEndpoint is the scenario's no-op endpoint: it reads the payload's
// submission time and answers 200 with a small JSON body.
type pushEndpoint struct {
	srv      *http.Server
	url      string
	received atomic.Int64
	inFlight atomic.Int64
	peak     atomic.Int64
	latency  atomic.Pointer[recorder]
}

func startPushEndpoint() (*pushEndpoint, error) {
	ln, err := net.Listen("tcp", pushEndpointHost+":0")
	if err != nil {
		return nil, err
	}
	e := &pushEndpoint{url: "http://" + ln.Addr().String() + "/deliver"}
	e.latency.Store(&recorder{})
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = e.srv.Serve(ln) }()
	return e, nil
}

func (e *pushEndpoint) serve(w http.ResponseWriter, r *http.Request) {
	n := e.inFlight.Add(1)
	defer e.inFlight.Add(-1)
	for p := e.peak.Load(); n > p && !e.peak.CompareAndSwap(p, n); p = e.peak.Load() {
	}
	var body struct {
		T int64 `json:"t"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err == nil && body.T > 0 {
		e.latency.Load().add(time.Since(time.Unix(0, body.T)))
	}
	e.received.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func runPush(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n == 0 {
		n = 20000
	}
	ep, err := startPushEndpoint()
	if err != nil {
		return Report{}, err
	}
	defer func() { _ = ep.srv.Close() }()
	const maxInFlight = 64
	queue := fmt.Sprintf("push-%d", time.Now().UnixNano())
	var settings struct {
		Push *struct {
			Secret string `json:"secret"`
		} `json:"push"`
	}
	if _, err := env.api.send(ctx, http.MethodPatch, "/queues/v1/"+queue,
		map[string]any{"push": map[string]any{"url": ep.url, "max_in_flight": maxInFlight, "timeout_seconds": 30}}, &settings); err != nil {
		return Report{}, fmt.Errorf("make %s a push queue (a server given with --url must allow %s in TASKMASTER_PUSH_ALLOWED_HOSTS): %w",
			queue, pushEndpointHost, err)
	}
	f := &PushFigures{MaxInFlight: maxInFlight, BurstTasks: n, PacedRate: opts.Rate}
	stamped := func(int) submitItem {
		return submitItem{Queue: queue, Payload: json.RawMessage(`{"t":` + strconv.FormatInt(time.Now().UnixNano(), 10) + `}`)}
	}

	// Burst.
	fmt.Fprintf(log, "[push] burst: %d tasks, max_in_flight %d\n", n, maxInFlight)
	stop := make(chan struct{})
	var submitted atomic.Int64
	go progress(log, "push", mon, stop, func() string {
		return fmt.Sprintf("submitted %d delivered %d in flight %d", submitted.Load(), ep.received.Load(), ep.inFlight.Load())
	})
	start := time.Now()
	if err := produceItems(ctx, env.api, n, opts.Producers, opts.BatchSize, stamped, &submitted); err != nil {
		close(stop)
		return Report{}, err
	}
	err = waitPush(ctx, func() bool { return ep.received.Load() >= int64(n) })
	delivered := time.Since(start)
	if err == nil {
		err = waitPush(ctx, func() bool { return doneCount(ctx, env, queue) >= int64(n) })
	}
	done := time.Since(start)
	close(stop)
	if err != nil {
		return Report{}, fmt.Errorf("burst: %d of %d delivered: %w", ep.received.Load(), n, err)
	}
	f.BurstTasksPerSec = round1(float64(n) / delivered.Seconds())
	f.BurstDoneTasksPerSec = round1(float64(n) / done.Seconds())
	f.BurstDeliveryLatencyMS = ep.latency.Load().percentiles()
	f.PeakInFlight = ep.peak.Load()

	// Paced.
	paced := int(float64(opts.Rate) * opts.Duration.Seconds())
	f.PacedTasks = paced
	ep.latency.Store(&recorder{})
	fmt.Fprintf(log, "[push] paced: %d tasks/s for %s\n", opts.Rate, opts.Duration)
	base := ep.received.Load()
	tick := time.NewTicker(time.Second / time.Duration(opts.Rate))
	var (
		wg   sync.WaitGroup
		errs = make(chan error, 1)
	)
	for i := 0; i < paced && ctx.Err() == nil; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := env.api.submit(ctx, stamped(0)); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	tick.Stop()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Report{}, err
	}
	if err := waitPush(ctx, func() bool { return ep.received.Load() >= base+int64(paced) }); err != nil {
		return Report{}, fmt.Errorf("paced: %d of %d delivered: %w", ep.received.Load()-base, paced, err)
	}
	f.PacedDeliveryLatencyMS = ep.latency.Load().percentiles()
	total := int64(n + paced)
	if err := waitPush(ctx, func() bool { return doneCount(ctx, env, queue) >= total }); err != nil {
		return Report{}, err
	}
	return Report{Tasks: n + paced, Producers: opts.Producers, Workers: 0, Finished: total,
		DurationSeconds: round3(time.Since(start).Seconds()), EndToEndTasksPerSec: f.BurstDoneTasksPerSec,
		SubmitToClaimMS: &f.PacedDeliveryLatencyMS, Push: f}, nil
}

// waitPush polls cond every 20 ms, for at most five minutes.
func waitPush(ctx context.Context, cond func() bool) error {
	deadline := time.Now().Add(5 * time.Minute)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// doneCount counts queue's DONE tasks: in the database when the benchmark
// has it, else from the queue's statistics (projected, a moment behind).
func doneCount(ctx context.Context, env *environment, queue string) int64 {
	var n int64
	if env.db != nil {
		_ = env.db.GetContext(ctx, &n, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'DONE'`, queue)
		return n
	}
	b, err := env.api.get(ctx, "/queues/v1/"+queue)
	if err != nil {
		return 0
	}
	var q struct {
		Done int64 `json:"done"`
	}
	_ = json.Unmarshal(b, &q)
	return q.Done
}

func printPush(w io.Writer, f *PushFigures) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "  push burst: %d tasks, max_in_flight %d (peak %d at the endpoint): delivered %.1f tasks/s, done %.1f tasks/s\n",
		f.BurstTasks, f.MaxInFlight, f.PeakInFlight, f.BurstTasksPerSec, f.BurstDoneTasksPerSec)
	fmt.Fprintf(w, "  push burst delivery latency: p50 %.2f ms  p95 %.2f ms  p99 %.2f ms\n",
		f.BurstDeliveryLatencyMS.P50, f.BurstDeliveryLatencyMS.P95, f.BurstDeliveryLatencyMS.P99)
	fmt.Fprintf(w, "  push paced (%d tasks/s, %d tasks) delivery latency: p50 %.2f ms  p95 %.2f ms  p99 %.2f ms\n",
		f.PacedRate, f.PacedTasks, f.PacedDeliveryLatencyMS.P50, f.PacedDeliveryLatencyMS.P95, f.PacedDeliveryLatencyMS.P99)
}
