package metrics_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/metrics"
)

// A push delivery is counted in taskmaster_push_delivery_seconds by queue
// and status class, "none" for one that got no answer.
func TestObserveDelivery(t *testing.T) {
	t.Parallel()
	r := metrics.NewRegistry(metrics.Params{})
	r.ObserveDelivery("hooks", 201, 20*time.Millisecond)
	r.ObserveDelivery("hooks", 204, 30*time.Millisecond)
	r.ObserveDelivery("hooks", 503, time.Second)
	r.ObserveDelivery("hooks", 0, 30*time.Second)
	families, err := r.Gatherer().Gather()
	require.NoError(t, err)
	counts := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "taskmaster_push_delivery_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, "hooks", labels["queue"])
			counts[labels["status_class"]] = m.GetHistogram().GetSampleCount()
		}
	}
	require.Equal(t, map[string]uint64{"2xx": 2, "5xx": 1, "none": 1}, counts)
}
