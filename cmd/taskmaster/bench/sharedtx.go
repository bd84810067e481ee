package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// SharedTxFigures are the server's shared transactions of one kind during a
// scenario (taskmaster_shared_transaction_*, the difference between a
// scrape of /metrics before the scenario and one after): how many ran, how
// many requests each served, how long a request waited for its
// transaction to start and how long the transactions ran. The percentiles
// are read off the histograms' buckets (each 1.5 times the one before,
// linear within a bucket): a claim's latency, as the server sees it, is
// about its wait plus its transaction's run.
type SharedTxFigures struct {
	Kind          string    `json:"kind"`
	Transactions  int64     `json:"transactions"`
	RequestsPerTx float64   `json:"requests_per_transaction"`
	WaitMS        Quantiles `json:"wait_ms"`
	RunMS         Quantiles `json:"run_ms"`
}

// Quantiles are estimates read off a histogram.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

const (
	sharedTxRequests = "taskmaster_shared_transaction_requests"
	sharedTxWait     = "taskmaster_shared_transaction_wait_seconds"
	sharedTxRun      = "taskmaster_shared_transaction_seconds"
)

// sharedTxScrape is the shared transactions' histograms at one moment, by
// metric name and kind (nil: /metrics could not be read). A histogram
// appears once a transaction of its kind ran: a server without them (an
// older binary, or one that ran none) gives no figures.
type sharedTxScrape map[string]map[string]*dto.Histogram

// scrapeSharedTx reads the histograms off the server's /metrics.
func scrapeSharedTx(ctx context.Context, a *api) sharedTxScrape {
	if a == nil {
		return nil
	}
	page, err := a.get(ctx, "/metrics")
	if err != nil {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		return nil
	}
	s := sharedTxScrape{}
	for _, name := range []string{sharedTxRequests, sharedTxWait, sharedTxRun} {
		s[name] = map[string]*dto.Histogram{}
		for _, m := range families[name].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" {
					s[name][l.GetValue()] = m.GetHistogram()
				}
			}
		}
	}
	return s
}

// sharedTxFigures are the transactions between before and after, by kind
// (kinds that ran none left out).
func sharedTxFigures(before, after sharedTxScrape) []SharedTxFigures {
	if before == nil || after == nil {
		return nil
	}
	var out []SharedTxFigures
	for kind, reqs := range after[sharedTxRequests] {
		d := histogramDelta(before[sharedTxRequests][kind], reqs)
		if d.count == 0 {
			continue
		}
		wait := histogramDelta(before[sharedTxWait][kind], after[sharedTxWait][kind])
		run := histogramDelta(before[sharedTxRun][kind], after[sharedTxRun][kind])
		out = append(out, SharedTxFigures{
			Kind:          kind,
			Transactions:  int64(d.count),
			RequestsPerTx: round1(d.sum / float64(d.count)),
			WaitMS:        Quantiles{P50: round3(1000 * wait.quantile(0.5)), P99: round3(1000 * wait.quantile(0.99))},
			RunMS:         Quantiles{P50: round3(1000 * run.quantile(0.5)), P99: round3(1000 * run.quantile(0.99))},
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out
}

// bucketCounts is a histogram's difference between two scrapes.
type bucketCounts struct {
	uppers []float64
	counts []float64 // cumulative, as exposed
	count  float64
	sum    float64
}

func histogramDelta(before, after *dto.Histogram) bucketCounts {
	var d bucketCounts
	if after == nil {
		return d
	}
	prior := map[float64]float64{}
	if before != nil {
		for _, b := range before.GetBucket() {
			prior[b.GetUpperBound()] = float64(b.GetCumulativeCount())
		}
		d.count, d.sum = -float64(before.GetSampleCount()), -before.GetSampleSum()
	}
	d.count += float64(after.GetSampleCount())
	d.sum += after.GetSampleSum()
	for _, b := range after.GetBucket() {
		d.uppers = append(d.uppers, b.GetUpperBound())
		d.counts = append(d.counts, float64(b.GetCumulativeCount())-prior[b.GetUpperBound()])
	}
	return d
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile
// does: linearly within the bucket that holds it, the first bucket from 0;
// beyond the last finite bound, that bound.
func (d bucketCounts) quantile(q float64) float64 {
	if d.count <= 0 || len(d.uppers) == 0 {
		return 0
	}
	rank := q * d.count
	lower, below := 0.0, 0.0
	for i, upper := range d.uppers {
		if d.counts[i] >= rank {
			if math.IsInf(upper, 1) || d.counts[i] == below {
				return lower
			}
			return lower + (upper-lower)*(rank-below)/(d.counts[i]-below)
		}
		lower, below = upper, d.counts[i]
	}
	return lower
}

func printSharedTx(w io.Writer, figures []SharedTxFigures) {
	for _, f := range figures {
		fmt.Fprintf(w, "  %-17s %d, %.1f requests each; a request waited p50 %.2f ms p99 %.2f ms for its transaction, which ran p50 %.2f ms p99 %.2f ms\n",
			"shared tx "+f.Kind+":", f.Transactions, f.RequestsPerTx, f.WaitMS.P50, f.WaitMS.P99, f.RunMS.P50, f.RunMS.P99)
	}
}
