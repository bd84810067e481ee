package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWakePayloadCountsTasksNowAndLater(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 500_000, time.UTC)
	var w queueWake
	w.add(time.Time{})                               // claimable now
	w.add(now)                                       // run_at = the transaction's now(): claimable now
	w.add(now.Add(-time.Second))                     // run_at past
	w.add(now.Add(1500 * time.Millisecond))          // in 1.5 s
	w.add(now.Add(1500 * time.Millisecond))          // the same
	w.add(now.Add(2*time.Second + time.Microsecond)) // rounded up, never early
	p := w.payload("q.1", now)
	require.Equal(t, "q.1 3 1500:2,2001:1", p)
	m := parseWake(p)
	require.Equal(t, wakeMessage{queue: "q.1", now: 3, delays: []wakeDelay{{1500 * time.Millisecond, 2}, {2001 * time.Millisecond, 1}}}, m)

	w = queueWake{everyone: true}
	w.add(time.Time{})
	require.Equal(t, "q", w.payload("q", now))
	require.Equal(t, wakeMessage{queue: "q", everyone: true}, parseWake("q"))
}

// Many distinct delays are rounded up to coarser steps until at most
// maxWakeDelays remain: every task is still counted, none wakes early.
func TestWakePayloadBoundsItsDelays(t *testing.T) {
	now := time.Now()
	var w queueWake
	for i := range 5000 {
		w.add(now.Add(time.Duration(i)*time.Millisecond + time.Millisecond))
	}
	p := w.payload("q", now)
	require.Less(t, len(p), 8000, "PostgreSQL's payload limit")
	m := parseWake(p)
	require.LessOrEqual(t, len(m.delays), maxWakeDelays)
	total := m.now
	for _, d := range m.delays {
		total += d.count
	}
	require.Equal(t, 5000, total)
	require.GreaterOrEqual(t, m.delays[0].after, time.Millisecond, "no task wakes before its run_at")
	require.GreaterOrEqual(t, m.delays[len(m.delays)-1].after, 5000*time.Millisecond)
}

// Anything unreadable wakes everyone on the queue it names.
func TestParseWakeFallsBackToEveryone(t *testing.T) {
	for _, p := range []string{"q x", "q -1", "q 1 a:1", "q 1 5:0", "q 1 5", "q 1 -5:1", "q 1 2:1 extra", fmt.Sprintf("q 1 %s:1", strings.Repeat("9", 30))} {
		m := parseWake(p)
		require.Equal(t, wakeMessage{queue: "q", everyone: true}, m, p)
	}
	require.Equal(t, wakeMessage{everyone: true}, parseWake(""))
}

func TestDueWakesMergeAndFireInOrder(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	var d dueWakes
	require.True(t, d.add(base.Add(30*time.Millisecond), "b", 1))
	require.True(t, d.add(base.Add(10*time.Millisecond), "a", 2))
	require.True(t, d.add(base.Add(5*time.Millisecond), "a", 1)) // the same 10 ms step as a's
	require.Equal(t, 2, d.len())
	require.Empty(t, d.popDue(base.Add(9*time.Millisecond)), "nothing before its time")
	got := d.popDue(base.Add(10 * time.Millisecond))
	require.Len(t, got, 1)
	require.Equal(t, "a", got[0].queue)
	require.Equal(t, 3, got[0].count)
	got = d.popDue(base.Add(time.Second))
	require.Len(t, got, 1)
	require.Equal(t, "b", got[0].queue)
	require.Zero(t, d.len())
}
