package metrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/metrics"
)

func TestQueueSeriesGivesRoomToTheMostActiveAndNeverMovesAQueue(t *testing.T) {
	t.Parallel()
	s := metrics.NewQueueSeries(3)
	require.ElementsMatch(t, []string{"a", "b"}, s.Assign([]metrics.QueueActivity{{Queue: "a"}, {Queue: "b"}}))
	require.False(t, s.Full())

	// Three new queues for one place left: the busiest takes it (recent
	// activity first, then backlog); a real queue named _other never does.
	got := s.Assign([]metrics.QueueActivity{
		{Queue: "a"}, {Queue: "b"}, {Queue: "_other", Recent: 1000},
		{Queue: "c", Recent: 5}, {Queue: "d", Recent: 5, Backlog: 1}, {Queue: "e", Backlog: 100},
	})
	require.ElementsMatch(t, []string{"a", "b", "d"}, got)
	require.True(t, s.Full())

	// Full: a queue that becomes the busiest later stays under _other.
	got = s.Assign([]metrics.QueueActivity{{Queue: "e", Recent: 1 << 40}, {Queue: "f", Recent: 1 << 40}})
	require.ElementsMatch(t, []string{"a", "b", "d"}, got)
}

func TestQueueSeriesNotFullWhileEverythingFits(t *testing.T) {
	t.Parallel()
	s := metrics.NewQueueSeries(2)
	require.ElementsMatch(t, []string{"a", "b"}, s.Assign([]metrics.QueueActivity{{Queue: "a"}, {Queue: "b"}}))
	require.False(t, s.Full(), "exactly at the cap, with nothing left out, a later queue could still be room-less: full only once one is")
	require.ElementsMatch(t, []string{"a", "b"}, s.Assign([]metrics.QueueActivity{{Queue: "c"}}))
	require.True(t, s.Full())
}
