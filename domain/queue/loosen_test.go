package queue_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/queue"
)

func TestLoosens(t *testing.T) {
	t.Parallel()
	n := func(v int) *int { return &v }
	rate := func(r float64, b int) *queue.RateLimit { return &queue.RateLimit{PerSecond: r, Burst: b} }
	cases := []struct {
		name          string
		before, after queue.Settings
		loosens, rate bool
	}{
		{"nothing", queue.Settings{}, queue.Settings{}, false, false},
		{"pause", queue.Settings{}, queue.Settings{Paused: true}, false, false},
		{"resume", queue.Settings{Paused: true}, queue.Settings{}, true, false},
		{"max set", queue.Settings{}, queue.Settings{MaxRunning: n(5)}, false, false},
		{"max lowered", queue.Settings{MaxRunning: n(5)}, queue.Settings{MaxRunning: n(4)}, false, false},
		{"max same", queue.Settings{MaxRunning: n(5)}, queue.Settings{MaxRunning: n(5)}, false, false},
		{"max raised", queue.Settings{MaxRunning: n(5)}, queue.Settings{MaxRunning: n(6)}, true, false},
		{"max cleared", queue.Settings{MaxRunning: n(5)}, queue.Settings{}, true, false},
		{"group raised", queue.Settings{MaxRunningPerGroup: n(1)}, queue.Settings{MaxRunningPerGroup: n(2)}, true, false},
		{"group set", queue.Settings{}, queue.Settings{MaxRunningPerGroup: n(2)}, false, false},
		{"rate set", queue.Settings{}, queue.Settings{RateLimit: rate(1, 1)}, false, true},
		{"rate same", queue.Settings{RateLimit: rate(1, 1)}, queue.Settings{RateLimit: rate(1, 1)}, false, false},
		{"rate changed", queue.Settings{RateLimit: rate(1, 1)}, queue.Settings{RateLimit: rate(0.5, 1)}, true, true},
		{"rate cleared", queue.Settings{RateLimit: rate(1, 1)}, queue.Settings{}, true, true},
		{"group rate set", queue.Settings{}, queue.Settings{RateLimitPerGroup: rate(1, 1)}, false, false},
		{"group rate changed", queue.Settings{RateLimitPerGroup: rate(1, 1)}, queue.Settings{RateLimitPerGroup: rate(2, 1)}, true, false},
		{"limit named", queue.Settings{}, queue.Settings{Limits: []string{"api"}}, false, false},
		{"limit dropped", queue.Settings{Limits: []string{"api", "db"}}, queue.Settings{Limits: []string{"db"}}, true, false},
		{"push on", queue.Settings{}, queue.Settings{Push: &queue.Push{MaxInFlight: 2}}, false, false},
		{"push off", queue.Settings{Push: &queue.Push{MaxInFlight: 2}}, queue.Settings{}, true, false},
		{"in flight lowered", queue.Settings{Push: &queue.Push{MaxInFlight: 2}}, queue.Settings{Push: &queue.Push{MaxInFlight: 1}}, false, false},
		{"in flight raised", queue.Settings{Push: &queue.Push{MaxInFlight: 2}}, queue.Settings{Push: &queue.Push{MaxInFlight: 3}}, true, false},
	}
	for _, c := range cases {
		require.Equal(t, c.loosens, queue.Loosens(c.before, c.after), c.name)
		require.Equal(t, c.rate, queue.RateLimitChanged(c.before, c.after), c.name)
	}
}
