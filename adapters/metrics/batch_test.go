package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/ports"
)

var _ ports.BatchObserver = (*metrics.Registry)(nil)

// A shared transaction counts once in taskmaster_shared_transaction_requests
// (its size) and _seconds, and each of its requests once in _wait_seconds,
// by kind.
func TestObserveBatch(t *testing.T) {
	t.Parallel()
	r := metrics.NewRegistry(metrics.Params{})
	r.ObserveBatch("claim", []time.Duration{0, time.Millisecond, 3 * time.Millisecond}, 2*time.Millisecond)
	r.ObserveBatch("claim", []time.Duration{0}, 4*time.Millisecond)
	r.ObserveBatch("report", []time.Duration{5 * time.Millisecond, 5 * time.Millisecond}, time.Second)
	families, err := r.Gatherer().Gather()
	require.NoError(t, err)
	type figures struct {
		count uint64
		sum   float64
	}
	got := map[string]figures{}
	for _, f := range families {
		switch f.GetName() {
		case "taskmaster_shared_transaction_requests", "taskmaster_shared_transaction_wait_seconds", "taskmaster_shared_transaction_seconds":
		default:
			continue
		}
		for _, m := range f.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			require.Equal(t, "kind", m.GetLabel()[0].GetName())
			h := m.GetHistogram()
			got[f.GetName()+"/"+m.GetLabel()[0].GetValue()] = figures{h.GetSampleCount(), h.GetSampleSum()}
		}
	}
	require.Equal(t, figures{2, 4}, got["taskmaster_shared_transaction_requests/claim"])
	require.Equal(t, figures{1, 2}, got["taskmaster_shared_transaction_requests/report"])
	require.Equal(t, uint64(2), got["taskmaster_shared_transaction_seconds/claim"].count)
	require.InDelta(t, 0.006, got["taskmaster_shared_transaction_seconds/claim"].sum, 1e-9)
	require.Equal(t, uint64(4), got["taskmaster_shared_transaction_wait_seconds/claim"].count)
	require.InDelta(t, 0.004, got["taskmaster_shared_transaction_wait_seconds/claim"].sum, 1e-9)
	require.InDelta(t, 0.010, got["taskmaster_shared_transaction_wait_seconds/report"].sum, 1e-9)
	require.InDelta(t, 1.0, got["taskmaster_shared_transaction_seconds/report"].sum, 1e-9)
}
