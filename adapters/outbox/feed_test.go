package outbox

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// readN reads the feed from cursor, limit messages at a time, until it has
// n events, and returns them and the cursor after them. It polls: messages
// stay invisible while any older transaction of the cluster runs (other
// tests' databases included).
func readN(t *testing.T, f *Feed, cursor string, limit, n int) ([]ports.FeedEvent, string) {
	t.Helper()
	var out []ports.FeedEvent
	deadline := time.Now().Add(30 * time.Second)
	for len(out) < n {
		require.True(t, time.Now().Before(deadline), "read %d of %d events", len(out), n)
		page, err := f.Read(ctxT(t), cursor, limit)
		require.NoError(t, err)
		require.Empty(t, page.Lost)
		out = append(out, page.Events...)
		cursor = page.Next
		if !page.More && len(out) < n {
			time.Sleep(10 * time.Millisecond) // poll: nothing to wait on
		}
	}
	require.Len(t, out, n)
	return out, cursor
}

func TestFeedReadsInCommitOrderAndResumesInsideAMessage(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	f := NewFeed(e.db.DB, DefaultConfig().StreamReadBytes, nil)
	_, _, err := e.workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)
	submitN(t, e, ctx, 3)
	claimed, err := claimedTasks(e.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Limit: ptr(5)})) // one message, 3 events
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	submitN(t, e, ctx, 1)

	all, end := readN(t, f, "0-0-0", 1, 8)
	types := make([]event.Type, len(all))
	for i, fe := range all {
		types[i] = fe.Type
	}
	require.Equal(t, []event.Type{
		event.WorkerRegistered, event.TaskSubmitted, event.TaskSubmitted, event.TaskSubmitted,
		event.TaskClaimed, event.TaskClaimed, event.TaskClaimed, event.TaskSubmitted,
	}, types)

	// Resuming after each event gives exactly the rest.
	for i, fe := range all {
		rest, _ := readN(t, f, fe.ID, 2, len(all)-i-1)
		if len(rest) > 0 {
			require.Equal(t, all[i+1:], rest, "after event %d (%s)", i, fe.ID)
		}
	}
	page, err := f.Read(ctx, end, 100)
	require.NoError(t, err)
	require.Empty(t, page.Events)
	// Nothing new: the position moves to just below the oldest running
	// transaction, past the last message.
	endCursor, err := parseCursor(end)
	require.NoError(t, err)
	next, err := parseCursor(page.Next)
	require.NoError(t, err)
	require.False(t, next.less(endCursor), "%s before %s", page.Next, end)
	require.Equal(t, int64(math.MaxInt64), next.pos.Offset)
	more, err := f.Read(ctx, page.Next, 100)
	require.NoError(t, err)
	require.Empty(t, more.Events)
}

// The tail is below the oldest transaction running in the cluster: a reader
// from the tail gets every event committed after it was taken (and may get a
// few committed just before).
func TestFeedTailMissesNothingCommittedAfterIt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 2)
	f := NewFeed(e.db.DB, DefaultConfig().StreamReadBytes, nil)
	tail, err := f.Tail(ctx)
	require.NoError(t, err)
	submitN(t, e, ctx, 3)
	msgs := outboxMessages(t, e.db)
	var after []string
	for _, m := range msgs[2:] {
		after = append(after, m.events[0].TaskID)
	}
	require.Eventually(t, func() bool {
		page, err := f.Read(ctx, tail, 100)
		require.NoError(t, err)
		var got []string
		for _, fe := range page.Events {
			got = append(got, taskIDOf(t, fe))
		}
		return len(got) >= 3 && slices.Equal(got[len(got)-3:], after)
	}, 30*time.Second, 10*time.Millisecond)
}

// A message of a transaction that committed while an older one is still
// running is held back (as watermill-sql does): otherwise the older one,
// committing later with a lower id, would be skipped.
func TestFeedHoldsBackMessagesBehindARunningTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	f := NewFeed(e.db.DB, DefaultConfig().StreamReadBytes, nil)
	tail, err := f.Tail(ctx)
	require.NoError(t, err)

	long, err := e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = long.ExecContext(ctx, `SELECT pg_current_xact_id()`) // takes a transaction id
	require.NoError(t, err)
	submitN(t, e, ctx, 1)
	page, err := f.Read(ctx, tail, 10)
	require.NoError(t, err)
	require.Empty(t, page.Events, "held back while an older transaction runs")
	require.NoError(t, long.Rollback())
	readN(t, f, tail, 10, 1)
}

func TestFeedReportsEventsTheJanitorDeleted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	f := NewFeed(e.db.DB, DefaultConfig().StreamReadBytes, nil)
	tail, err := f.Tail(ctx)
	require.NoError(t, err)
	submitN(t, e, ctx, 4)
	all := positions(outboxMessages(t, e.db))
	first, _ := readN(t, f, tail, 1, 4)

	builtInGroupsAt(t, e, all[1])
	cfg := DefaultConfig()
	cfg.Retention = 0
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)
	n, err := j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	// From the tail (before everything): the first two are gone.
	page, err := f.Read(ctx, tail, 10)
	require.NoError(t, err)
	require.Equal(t, cursor{pos: all[1], index: 1<<31 - 1}.String(), page.Lost)
	require.Equal(t, first[2:], page.Events)
	// From the second event (the last deleted): nothing lost.
	page, err = f.Read(ctx, first[1].ID, 10)
	require.NoError(t, err)
	require.Empty(t, page.Lost)
	require.Equal(t, first[2:], page.Events)
}

// A cursor the database has not reached (its history went back: a failover
// to a standby that had not received everything) is reported lost, and
// reading resumes before what was committed lately, instead of skipping
// every message until transaction ids pass the cursor again.
func TestFeedResumesBeforeTheFailoverFromACursorTheDatabaseHasNotReached(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	f := NewFeed(e.db.DB, DefaultConfig().StreamReadBytes, nil)
	submitN(t, e, ctx, 2)
	tail, err := f.Tail(ctx)
	require.NoError(t, err)
	tc, err := parseCursor(tail)
	require.NoError(t, err)
	// A position of transactions the database never had (or lost).
	ahead := cursor{pos: Position{TransactionID: tc.pos.TransactionID + 100000, Offset: 1}}.String()

	page, err := f.Read(ctx, ahead, 10)
	require.NoError(t, err)
	require.Equal(t, ahead, page.Lost, "the events through the cursor are lost")
	require.Empty(t, page.Events)
	// This server replayed nothing: it goes back RewindMargin before now,
	// which covers both messages.
	events, _ := readN(t, f, page.Next, 10, 2)
	require.Equal(t, event.TaskSubmitted, events[0].Type)
	require.Equal(t, event.TaskSubmitted, events[1].Type)
}

func TestFeedRejectsMalformedCursors(t *testing.T) {
	t.Parallel()
	f := NewFeed(nil, DefaultConfig().StreamReadBytes, nil)
	for _, c := range []string{"", "x", "1-2", "1-2-3-4", "a-2-3", "1--2-3", "1-2-x", "-1-2-3"} {
		_, err := f.Read(ctxT(t), c, 10)
		require.ErrorIs(t, err, ports.ErrInvalidCursor, c)
	}
}

// taskIDOf decodes the task id of a feed event's JSON.
func taskIDOf(t *testing.T, fe ports.FeedEvent) string {
	t.Helper()
	var e event.Event
	require.NoError(t, json.Unmarshal(fe.Data, &e))
	return e.TaskID
}
