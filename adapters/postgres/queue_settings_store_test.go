package postgres_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/ports"
)

// QueueSettingsStore.Update creates the row of a queue without one, saves
// the settings fn returns with their events, resets the rate limit's bucket
// only when the limit changes, and wakes waiting claims (NOTIFY on commit)
// only when the change may let them take more.
func TestQueueSettingsStoreUpdate(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	connector, err := pq.NewConnector(url)
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(postgres.NewCachingConnector(connector, 0)), "postgres")
	t.Cleanup(func() { _ = db.Close() })
	tx := postgres.NewTxRunner(db)

	listener := pq.NewListener(url, time.Second, time.Second, nil)
	t.Cleanup(func() { _ = listener.Close() })
	require.NoError(t, listener.Listen(postgres.NotifyChannel))
	woke := func() []string {
		var out []string
		for {
			select {
			case n := <-listener.Notify:
				if n != nil {
					out = append(out, n.Extra)
				}
			case <-time.After(300 * time.Millisecond):
				return out
			}
		}
	}

	update := func(name string, p queue.Patch) (queue.Settings, error) {
		var out queue.Settings
		err := tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
			var err error
			out, _, err = st.QueueSettings.Update(ctx, name, func(s queue.Settings, now time.Time) (queue.Settings, []event.Event, error) {
				next := p.Apply(s)
				e := event.Audit(event.AuditQueueSettingsChanged, "k", now)
				e.Queue, e.Settings = name, &next
				return next, []event.Event{e}, nil
			})
			return err
		})
		return out, err
	}
	n := func(v int) *int { return &v }
	yes, no := true, false

	got, err := update("q", queue.Patch{Paused: &yes, MaxRunning: queue.Optional[int]{Set: true, Value: n(2)},
		RateLimit: queue.Optional[queue.RateLimit]{Set: true, Value: &queue.RateLimit{PerSecond: 1, Burst: 2}}})
	require.NoError(t, err)
	require.Equal(t, queue.Settings{Paused: true, MaxRunning: n(2), RateLimit: &queue.RateLimit{PerSecond: 1, Burst: 2}}, got)
	require.Empty(t, woke(), "pausing and setting limits let claims take nothing more")

	_, err = db.Exec(`UPDATE queue_settings SET tokens = 0, tokens_at = now() WHERE queue = 'q'`)
	require.NoError(t, err)
	_, err = update("q", queue.Patch{MaxRunning: queue.Optional[int]{Set: true, Value: n(1)}})
	require.NoError(t, err)
	require.Empty(t, woke(), "a lowered cap")
	var tokens sql.NullFloat64
	require.NoError(t, db.Get(&tokens, `SELECT tokens FROM queue_settings WHERE queue = 'q'`))
	require.True(t, tokens.Valid, "the bucket stays while the rate limit does")

	_, err = update("q", queue.Patch{Paused: &no})
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, woke(), "resumed")
	_, err = update("q", queue.Patch{RateLimit: queue.Optional[queue.RateLimit]{Set: true, Value: &queue.RateLimit{PerSecond: 5, Burst: 5}}})
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, woke(), "a changed rate limit starts full")
	require.NoError(t, db.Get(&tokens, `SELECT tokens FROM queue_settings WHERE queue = 'q'`))
	require.False(t, tokens.Valid, "a changed rate limit empties the bucket's level: full")
	_, err = update("q", queue.Patch{MaxRunning: queue.Optional[int]{Set: true}})
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, woke(), "a cleared cap")

	// fn's error saves nothing, not even the row of a new queue.
	err = tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.QueueSettings.Update(ctx, "other", func(queue.Settings, time.Time) (queue.Settings, []event.Event, error) {
			return queue.Settings{}, nil, errors.New("refused")
		})
		return err
	})
	require.ErrorContains(t, err, "refused")
	var rows int
	require.NoError(t, db.Get(&rows, `SELECT count(*) FROM queue_settings`))
	require.Equal(t, 1, rows)

	// Every change's audit event is in the outbox, with the settings after it.
	var payloads []string
	require.NoError(t, db.Select(&payloads, `SELECT payload::text FROM watermill_taskmaster_events ORDER BY "offset"`))
	require.Len(t, payloads, 5)
	var last envelope.Payload
	require.NoError(t, json.Unmarshal([]byte(payloads[4]), &last))
	require.Len(t, last.Events, 1)
	require.Equal(t, event.AuditQueueSettingsChanged, last.Events[0].Type)
	require.Equal(t, &queue.Settings{RateLimit: &queue.RateLimit{PerSecond: 5, Burst: 5}}, last.Events[0].Settings)
}
