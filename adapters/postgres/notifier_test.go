package postgres_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/ports"
)

// startNotifier runs a notifier on a fresh database and returns a function
// that sends a payload on its channel.
func startNotifier(t *testing.T) (*postgres.Notifier, func(payload string)) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db := open(t, url, postgres.DefaultConnConfig())
	n := postgres.NewNotifier(url, postgres.DefaultConnConfig(), zap.NewNop())
	require.NoError(t, n.Start(t.Context()))
	t.Cleanup(func() { _ = n.Stop(t.Context()) })
	send := func(payload string) {
		t.Helper()
		_, err := db.ExecContext(t.Context(), `SELECT pg_notify($1, $2)`, postgres.NotifyChannel, payload)
		require.NoError(t, err)
	}
	// The listener is up once a wake-up gets through.
	w := n.Wait(ports.WaitSpec{Queues: []string{"probe"}, Limit: 1})
	defer w.Close()
	require.Eventually(t, func() bool {
		send("probe 1")
		select {
		case <-w.C():
			return true
		case <-time.After(50 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	return n, send
}

// woken waits for the wake-ups that a notification brings and reports which
// of ws got one (taking it).
func woken(ws []ports.TaskWait) []int {
	time.Sleep(200 * time.Millisecond)
	var got []int
	for i, w := range ws {
		select {
		case <-w.C():
			got = append(got, i)
		default:
		}
	}
	return got
}

func waits(t *testing.T, n *postgres.Notifier, count int, spec ports.WaitSpec) []ports.TaskWait {
	t.Helper()
	ws := make([]ports.TaskWait, count)
	for i := range ws {
		ws[i] = n.Wait(spec)
		t.Cleanup(ws[i].Close)
	}
	return ws
}

func TestNotifierWakesAsManyWaitersAsTasks(t *testing.T) {
	t.Parallel()
	n, send := startNotifier(t)
	ws := waits(t, n, 6, ports.WaitSpec{Queues: []string{"q"}, Limit: 1})
	other := waits(t, n, 2, ports.WaitSpec{Queues: []string{"other"}, Limit: 1})

	send("q 1")
	require.Equal(t, []int{0}, woken(ws), "one task wakes the longest-waiting claim")
	send("q 3")
	require.Equal(t, []int{0, 1, 2}, woken(ws), "three tasks, three claims, oldest first")
	require.Empty(t, woken(other), "other queues' claims sleep on")
	send("q 0 300:2")
	require.Empty(t, woken(ws), "delayed tasks wake nobody at once")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, []int{0, 1}, woken(ws), "two delayed tasks wake two claims when they fall due")
	send("q")
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, woken(ws), "a resumed queue wakes everyone")
	require.Empty(t, woken(other))

	st := n.Stats()
	require.EqualValues(t, 8, st.Waiting)
	require.EqualValues(t, 2, st.Due)
	require.EqualValues(t, 6, st.Everyone)
}

// Waiters' limits add up: a claim of 10 takes the place of ten of one.
func TestNotifierCountsWaitersLimits(t *testing.T) {
	t.Parallel()
	n, send := startNotifier(t)
	big := n.Wait(ports.WaitSpec{Queues: []string{"q"}, Limit: 10})
	t.Cleanup(big.Close)
	small := waits(t, n, 3, ports.WaitSpec{Queues: []string{"q"}, Limit: 1})
	send("q 10")
	require.Equal(t, []int{0}, woken(append([]ports.TaskWait{big}, small...)))
	send("q 12")
	require.Equal(t, []int{0, 1, 2}, woken(append([]ports.TaskWait{big}, small...)))
}

// Tasks may need tags the first waiters lack: one waiter of each set of
// tags wakes besides the count.
func TestNotifierWakesOneWaiterOfEachSetOfTags(t *testing.T) {
	t.Parallel()
	n, send := startNotifier(t)
	var ws []ports.TaskWait
	for _, tags := range [][]string{nil, nil, {"gpu"}, {"gpu"}, {"arm", "gpu"}} {
		ws = append(ws, waits(t, n, 1, ports.WaitSpec{Queues: []string{"q"}, Limit: 1, Tags: tags})...)
	}
	anyQueue := waits(t, n, 1, ports.WaitSpec{Limit: 1})
	send("q 1")
	require.Equal(t, []int{0, 2, 4}, woken(ws))
	require.Equal(t, []int{0}, woken(anyQueue), "a claim on any queue has its own turn")
}

// A wake-up its waiter cannot use goes to another waiter: passed on
// explicitly after a failed claim, or by closing without taking it.
func TestNotifierPassesUnusedWakeUps(t *testing.T) {
	t.Parallel()
	n, send := startNotifier(t)
	ws := waits(t, n, 3, ports.WaitSpec{Queues: []string{"q"}, Limit: 1})
	send("q 1")
	require.Eventually(t, func() bool { return len(ws[0].C()) == 1 }, 10*time.Second, time.Millisecond)
	ws[0].Close() // its request ended before it looked
	require.Equal(t, []int{0}, woken(ws[1:]), "the next waiter (ws[1]) got the wake-up")

	send("q 1")
	require.Eventually(t, func() bool { return len(ws[1].C()) == 1 }, 10*time.Second, time.Millisecond)
	<-ws[1].C()
	ws[1].Pass() // its claim failed
	require.Equal(t, []int{1}, woken(ws[1:]), "the next waiter (ws[2]) got the wake-up")
	require.EqualValues(t, 2, n.Stats().Passed)
}

// Stopping closes every wait: waiting claims answer at once.
func TestNotifierStopClosesWaits(t *testing.T) {
	t.Parallel()
	n, _ := startNotifier(t)
	ws := waits(t, n, 2, ports.WaitSpec{Queues: []string{"q"}, Limit: 1})
	n.CloseWaits()
	for _, w := range ws {
		_, open := <-w.C()
		require.False(t, open)
		w.Close()
	}
	require.Zero(t, n.Stats().Waiting)
}
