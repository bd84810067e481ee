package outboxe2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// outboxCLI runs `taskmaster outbox args...` against databaseURL.
func outboxCLI(t *testing.T, databaseURL string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := app.OutboxCommand(context.Background(), args, func(k string) string {
		if k == "TASKMASTER_DATABASE_URL" {
			return databaseURL
		}
		return ""
	}, &stdout, &stderr)
	return stdout.String(), err
}

// A message the statistics cannot apply (here a constraint an operator
// added by mistake refuses its queue) is set aside after its attempts: the
// statistics go on without it, /metrics counts it, `taskmaster outbox
// poison list` shows it, and once the cause is fixed `replay --all` applies
// it, once.
func TestSetAsideMessagesAreCountedListedAndReplayedFromTheCLI(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastOutbox)
	c := newClient(t, func() string { return s.URL })
	_, err := s.DB.Exec(`ALTER TABLE queue_totals ADD CONSTRAINT refuse_fragile CHECK (queue <> 'fragile')`)
	require.NoError(t, err)
	for _, q := range []string{"steady", "fragile", "steady"} {
		require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1", map[string]any{"queue": q}, nil))
	}
	waitCaughtUp(t, s.DB)
	poisonGauge := func() float64 {
		m := sample(scrape(t, s.URL+"/metrics"), "taskmaster_outbox_poison_messages", map[string]string{"projection": outbox.QueueStatsProjection})
		require.NotNil(t, m)
		return m.GetGauge().GetValue()
	}
	require.Equal(t, 1.0, poisonGauge())
	require.Equal(t, map[string]int64{"steady/PENDING": 2}, projectedCounts(t, s.DB), "the statistics went on")

	out, err := outboxCLI(t, s.DatabaseURL, "poison", "list", "--json")
	require.NoError(t, err)
	var listed []struct {
		ID         int64  `json:"id"`
		Projection string `json:"projection"`
		Events     int    `json:"events"`
		Attempts   int    `json:"attempts"`
		Error      string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 1)
	require.Equal(t, outbox.QueueStatsProjection, listed[0].Projection)
	require.Equal(t, 1, listed[0].Events)
	require.Equal(t, s.Config.Outbox.PoisonAttempts, listed[0].Attempts)
	require.Contains(t, listed[0].Error, "refuse_fragile")
	table, err := outboxCLI(t, s.DatabaseURL, "poison", "list")
	require.NoError(t, err)
	require.Contains(t, table, "refuse_fragile")

	// Replaying before the fix fails and changes nothing but the attempts.
	_, err = outboxCLI(t, s.DatabaseURL, "poison", "replay", "--all")
	require.Error(t, err)
	require.Equal(t, map[string]int64{"steady/PENDING": 2}, projectedCounts(t, s.DB))

	_, err = s.DB.Exec(`ALTER TABLE queue_totals DROP CONSTRAINT refuse_fragile`)
	require.NoError(t, err)
	out, err = outboxCLI(t, s.DatabaseURL, "poison", "replay", "--all")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 1 ")
	out, err = outboxCLI(t, s.DatabaseURL, "poison", "replay", "--all")
	require.NoError(t, err)
	require.Contains(t, out, "replayed 0 ")
	require.Equal(t, truthCounts(t, s.DB), projectedCounts(t, s.DB))
	var resp struct {
		Queues []queueJSON `json:"queues"`
	}
	require.Eventually(t, func() bool {
		c.mustCall("GET", "/queues/v1", nil, &resp)
		for _, q := range resp.Queues {
			if q.Queue == "fragile" {
				return q.Pending == 1 && q.Totals.Submitted == 1
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 0.0, poisonGauge())

	_, err = outboxCLI(t, s.DatabaseURL, "poison", "replay", "12x")
	require.ErrorIs(t, err, app.ErrUsage)
	_, err = outboxCLI(t, s.DatabaseURL, "poison", "replay", "424242")
	require.ErrorIs(t, err, outbox.ErrPoisonNotFound)
}
