package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// memoryBatchBodyBytes is the server's default batch body limit: the memory
// scenario's submits fill bodies up to it.
const memoryBatchBodyBytes = 16 << 20

// runMemory measures the server's memory under large payloads: producers
// submit tasks of opts.PayloadBytes in batch bodies of up to 16 MiB, as fast
// as they can, while opts.Claimers workers claim opts.MemoryClaim at a time
// (long polls) and complete them in batches. Requests the in-flight caps
// refuse (503 overloaded) are repeated after Retry-After, and counted. The
// figure is the server's resident set size high-water mark (VmHWM, reset
// when the scenario starts).
func runMemory(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n == 0 {
		n = 400
	}
	perBatch := max(1, min(memoryBatchBodyBytes/(opts.PayloadBytes+256), 1000))
	resetPeakRSS(env.serverPID)
	a := newAPI(env.api.base, opts.Claimers+opts.Producers)
	a.key = env.api.key
	queue := fmt.Sprintf("memory-%d", time.Now().UnixNano())
	payload, err := memoryPayload(opts)
	if err != nil {
		return Report{}, err
	}
	var submitted, completed atomic.Int64
	claims := &recorder{}
	stop := make(chan struct{})
	start := time.Now()
	go progress(log, "memory", mon, stop, func() string {
		return fmt.Sprintf("submitted %d/%d completed %d/%d, %d answers 503 waited out",
			submitted.Load(), n, completed.Load(), n, a.refused.Load())
	})
	defer close(stop)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var perr error
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		perr = producePayload(ctx, a, queue, n, opts.Producers, perBatch, payload, &submitted)
		if perr != nil {
			cancel() // the workers would wait for tasks that never come
		}
	}()
	werr := drain(ctx, a, queue, int64(n), opts.Claimers, opts.MemoryClaim, reportBatches, nil, claims, nil, &completed)
	pwg.Wait()
	if err := errors.Join(perr, werr); err != nil {
		return Report{}, err
	}
	elapsed := time.Since(start)
	_, hwm, _ := processRSS(env.serverPID)
	fmt.Fprintf(log, "[memory] %d tasks of %d bytes in batches of %d, %d claimers x %d: %.0f MiB through the server in %.1f s; "+
		"server RSS high-water mark %.1f MiB; %d answers 503 overloaded\n",
		n, opts.PayloadBytes, perBatch, opts.Claimers, opts.MemoryClaim, float64(n)*float64(opts.PayloadBytes)/(1<<20),
		elapsed.Seconds(), float64(hwm)/(1<<20), a.refused.Load())
	return Report{
		Tasks: n, Producers: opts.Producers, Workers: opts.Claimers, Finished: int64(n),
		DurationSeconds:     round3(elapsed.Seconds()),
		EndToEndTasksPerSec: round1(float64(n) / elapsed.Seconds()),
		ClaimLatencyMS:      claims.percentiles(),
		PayloadBytes:        opts.PayloadBytes,
		PayloadKind:         opts.MemoryPayload,
		OverloadedAnswers:   a.refused.Load(),
		ServerRSSHighWater:  hwm,
	}, nil
}

// resetPeakRSS resets the peak resident set size (VmHWM) of pid, where the
// kernel allows it (Linux: clear_refs 5), so that the scenario reports its
// own peak.
func resetPeakRSS(pid int) {
	if pid != 0 {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// amplifiedNumber is the number the amplified payloads repeat: 6 bytes in
// an array ("1e-18,"), 22 once stored ("0.000000000000000001, "), 3.7
// times: the most the server accepts of a whole request is 4 times.
const amplifiedNumber = "1e-18"

// memoryPayload is a payload of about opts.PayloadBytes of JSON: one long
// string, or (amplified) an array of amplifiedNumber.
func memoryPayload(opts Options) (json.RawMessage, error) {
	if opts.MemoryPayload == "amplified" {
		n := max(1, opts.PayloadBytes/(len(amplifiedNumber)+1))
		return json.RawMessage("[" + strings.TrimSuffix(strings.Repeat(amplifiedNumber+",", n), ",") + "]"), nil
	}
	return json.Marshal(map[string]string{"blob": strings.Repeat("x", max(opts.PayloadBytes-12, 0))})
}
