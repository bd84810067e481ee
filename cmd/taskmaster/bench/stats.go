package bench

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Percentiles are latency percentiles in milliseconds.
type Percentiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
	N   int     `json:"n"`
}

// recorder collects latencies from many goroutines.
type recorder struct {
	mu sync.Mutex
	d  []time.Duration
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.d = append(r.d, d)
	r.mu.Unlock()
}

func (r *recorder) percentiles() Percentiles {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.d) == 0 {
		return Percentiles{}
	}
	s := append([]time.Duration(nil), r.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(s)))) - 1
		if i < 0 {
			i = 0
		}
		return ms(s[i])
	}
	return Percentiles{P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: ms(s[len(s)-1]), N: len(s)}
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Microsecond)) / 1000 }
