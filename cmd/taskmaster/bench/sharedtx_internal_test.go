package bench

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func histogram(count uint64, sum float64, cumulative map[float64]uint64, uppers ...float64) *dto.Histogram {
	h := &dto.Histogram{SampleCount: proto.Uint64(count), SampleSum: proto.Float64(sum)}
	for _, u := range uppers {
		h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: proto.Float64(u), CumulativeCount: proto.Uint64(cumulative[u])})
	}
	return h
}

// The figures are the transactions between the two scrapes: counts and
// sums subtracted, quantiles interpolated within the bucket that holds
// them, kinds that ran nothing left out.
func TestSharedTxFiguresAreTheDifferenceBetweenScrapes(t *testing.T) {
	t.Parallel()
	uppers := []float64{0.001, 0.002, 0.004}
	before := sharedTxScrape{
		sharedTxRequests: {"claim": histogram(10, 30, map[float64]uint64{0.001: 10, 0.002: 10, 0.004: 10}, uppers...),
			"report": histogram(5, 5, map[float64]uint64{0.001: 5, 0.002: 5, 0.004: 5}, uppers...)},
		sharedTxWait: {"claim": histogram(30, 0.01, map[float64]uint64{0.001: 30, 0.002: 30, 0.004: 30}, uppers...)},
		sharedTxRun:  {"claim": histogram(10, 0.01, map[float64]uint64{0.001: 10, 0.002: 10, 0.004: 10}, uppers...)},
	}
	after := sharedTxScrape{
		// 10 more claim transactions of 8 requests; no more reports.
		sharedTxRequests: {"claim": histogram(20, 110, map[float64]uint64{0.001: 10, 0.002: 10, 0.004: 10}, uppers...),
			"report": histogram(5, 5, map[float64]uint64{0.001: 5, 0.002: 5, 0.004: 5}, uppers...)},
		// 80 more waits: 40 under 1 ms, 40 between 1 and 2 ms.
		sharedTxWait: {"claim": histogram(110, 0.2, map[float64]uint64{0.001: 70, 0.002: 110, 0.004: 110}, uppers...)},
		// 10 more runs: all between 2 and 4 ms.
		sharedTxRun: {"claim": histogram(20, 0.04, map[float64]uint64{0.001: 10, 0.002: 10, 0.004: 20}, uppers...)},
	}
	got := sharedTxFigures(before, after)
	require.Len(t, got, 1)
	f := got[0]
	require.Equal(t, "claim", f.Kind)
	require.Equal(t, int64(10), f.Transactions)
	require.Equal(t, 8.0, f.RequestsPerTx)
	require.InDelta(t, 1.0, f.WaitMS.P50, 1e-9)  // the 40th of 80: the top of the first bucket
	require.InDelta(t, 1.98, f.WaitMS.P99, 1e-9) // 79.2nd: 39.2/40 into the second
	require.InDelta(t, 3.0, f.RunMS.P50, 1e-9)
	require.InDelta(t, 3.98, f.RunMS.P99, 1e-9)

	// Before the first transaction of a kind its histograms are absent:
	// every transaction of the second scrape counts.
	fromStart := sharedTxFigures(sharedTxScrape{}, after)
	require.Len(t, fromStart, 2)
	require.Equal(t, int64(20), fromStart[0].Transactions)
	require.Equal(t, 5.5, fromStart[0].RequestsPerTx)
	require.Equal(t, "report", fromStart[1].Kind)
	require.Nil(t, sharedTxFigures(nil, after), "no figures when /metrics could not be read")
	require.Empty(t, sharedTxFigures(sharedTxScrape{}, sharedTxScrape{}), "a server without the metrics gives none")
}
