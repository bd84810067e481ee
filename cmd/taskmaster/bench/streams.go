package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StreamFigures are the streams scenario's event stream figures.
type StreamFigures struct {
	// Streams is how many streams the scenario opened at once.
	Streams int `json:"streams"`
	// Opened is how many the server accepted; Refused how many it refused
	// (503: more streams than it serves at once).
	Opened  int `json:"opened"`
	Refused int `json:"refused"`
	// Dropped is how many the server ended early (a too-slow client, or the
	// stream broke).
	Dropped int `json:"dropped"`
	// ProbeEvents is how many events each stream's filter matched; Complete
	// how many streams received every one of them.
	ProbeEvents int `json:"probe_events"`
	Complete    int `json:"complete"`
	// Delivered counts the events all streams received.
	Delivered int64 `json:"delivered"`
	// DeliveryLagMS is the time from an event's database time to its
	// arrival at a stream client.
	DeliveryLagMS Percentiles `json:"delivery_lag_ms"`
}

// probeInterval is the pace of the probe task submissions the streams
// scenario's streams watch.
const probeInterval = 20 * time.Millisecond

// runStreams opens opts.Streams event streams (GET /events/v1) that watch a
// probe queue, then runs the batch workload at full speed on another queue
// while a producer submits a probe task every 20 ms. Every stream receives
// every probe event; the delivery lag is measured per event and stream, and
// the monitor reports the server's RSS.
func runStreams(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n == 0 {
		n = 100000
	}
	run := time.Now().UnixNano()
	probe := fmt.Sprintf("probe-%d", run)
	queue := fmt.Sprintf("streams-%d", run)

	sctx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	hc := &http.Client{Transport: &http.Transport{
		DialContext:        (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableCompression: true,
		MaxIdleConns:       -1,
	}}
	fig := &StreamFigures{Streams: opts.Streams}
	var (
		mu       sync.Mutex
		lags     recorder
		received = make([]atomic.Int64, opts.Streams)
		opened   sync.WaitGroup
		wg       sync.WaitGroup
		openErr  atomic.Value
	)
	fmt.Fprintf(log, "[streams] opening %d event streams on queue %s\n", opts.Streams, probe)
	for i := range opts.Streams {
		opened.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, local, dropped, err := watchStream(sctx, hc, env.api.base+"/events/v1?queue="+probe, opened.Done, &received[i])
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status == http.StatusServiceUnavailable:
				fig.Refused++
			case status == http.StatusOK:
				fig.Opened++
				if dropped {
					fig.Dropped++
				}
			case err != nil && sctx.Err() == nil:
				openErr.Store(err)
			}
			for _, d := range local {
				lags.add(d)
			}
		}()
	}
	opened.Wait()
	if err, _ := openErr.Load().(error); err != nil {
		return Report{}, fmt.Errorf("open event streams: %w", err)
	}

	var submitted, completed, probes atomic.Int64
	claims := &recorder{}
	stop := make(chan struct{})
	start := time.Now()
	go progress(log, "streams", mon, stop, func() string {
		var got int64
		for i := range received {
			got += received[i].Load()
		}
		return fmt.Sprintf("completed %d/%d, probe events %d, delivered %d", completed.Load(), n, probes.Load(), got)
	})
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan error, 1)
	go func() {
		t := time.NewTicker(probeInterval)
		defer t.Stop()
		for {
			select {
			case <-probeCtx.Done():
				probeDone <- nil
				return
			case <-t.C:
			}
			if err := env.api.submit(probeCtx, submitItem{Queue: probe}); err != nil {
				if probeCtx.Err() == nil {
					probeDone <- err
					return
				}
				continue
			}
			probes.Add(1)
		}
	}()
	_, lerr := produceAndDrain(ctx, env, opts, queue, n, false, claims, &submitted, &completed)
	end := time.Now()
	stopProbe()
	if err := errors.Join(lerr, <-probeDone); err != nil {
		close(stop)
		return Report{}, err
	}
	fig.ProbeEvents = int(probes.Load())
	// Let the last probe events arrive.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		complete := 0
		for i := range received {
			if received[i].Load() >= int64(fig.ProbeEvents) {
				complete++
			}
		}
		fig.Complete = complete
		if complete == opts.Streams {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	cancelStreams()
	wg.Wait()
	for i := range received {
		fig.Delivered += received[i].Load()
	}
	fig.DeliveryLagMS = lags.percentiles()
	return Report{
		Tasks: n, Producers: opts.Producers, Workers: opts.Workers,
		DurationSeconds:     round3(end.Sub(start).Seconds()),
		EndToEndTasksPerSec: round1(float64(n) / end.Sub(start).Seconds()),
		ClaimLatencyMS:      claims.percentiles(),
		Streams:             fig,
	}, nil
}

// watchStream reads one event stream until ctx ends or the server ends it.
// It calls ready once the stream is open (or failed to open), counts the
// events it receives and returns their delivery lags, the response status
// and whether the server ended the stream early.
func watchStream(ctx context.Context, hc *http.Client, url string, ready func(), count *atomic.Int64) (status int, lags []time.Duration, dropped bool, err error) {
	readyOnce := sync.OnceFunc(ready)
	defer readyOnce()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil, false, fmt.Errorf("GET /events/v1: %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "retry:") {
			readyOnce()
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var e struct {
			Type       string    `json:"type"`
			OccurredAt time.Time `json:"occurred_at"`
		}
		if json.Unmarshal([]byte(data), &e) != nil {
			continue
		}
		if strings.HasPrefix(e.Type, "stream.") {
			if e.Type != "stream.events_lost" {
				dropped = true
			}
			continue
		}
		lags = append(lags, time.Since(e.OccurredAt))
		count.Add(1)
	}
	if ctx.Err() == nil {
		dropped = true // the server ended the stream
	}
	return http.StatusOK, lags, dropped, nil
}
