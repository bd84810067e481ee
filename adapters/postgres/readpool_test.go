package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/ports"
)

// startReadPool opens and starts a read pool on the standby, falling back to
// the primary beyond maxLag; stopped and closed when the test ends.
func startReadPool(t *testing.T, primary, standby *localpg.Server, maxLag time.Duration) *postgres.ReadPool {
	t.Helper()
	p, err := postgres.OpenReadPool(postgres.ReadPoolConfig{
		ReplicaURL: standby.URL("postgres"), PrimaryURL: primary.URL("postgres"),
		Pool:   postgres.PoolConfig{MaxOpen: 4, MaxIdle: 4, Conn: postgres.DefaultConnConfig()},
		MaxLag: maxLag, CheckInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, p.Start(t.Context()))
	t.Cleanup(func() {
		require.NoError(t, p.Stop(context.Background()))
		require.NoError(t, p.Close())
	})
	return p
}

func count(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n, `SELECT count(*) FROM written`))
	return n
}

// The reads go to a replica that keeps up, and see what it has replayed;
// one that falls behind more than the bound, or cannot be reached, hands
// them to the primary until it is back, and the pooled connections move with
// them.
func TestReadPoolFollowsTheReplicaWhileItKeepsUp(t *testing.T) {
	t.Parallel()
	primary, standby := replicaPair(t)
	pdb := open(t, primary.URL("postgres"), postgres.DefaultConnConfig())
	sdb := open(t, standby.URL("postgres")+"&target_session_attrs=any", postgres.DefaultConnConfig())
	_, err := pdb.ExecContext(t.Context(), `CREATE TABLE written (id int); INSERT INTO written VALUES (1)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return sdb.GetContext(t.Context(), &n, `SELECT count(*) FROM written`) == nil && n == 1
	}, 30*time.Second, 10*time.Millisecond, "replicated")

	patient := startReadPool(t, primary, standby, time.Hour)
	strict := startReadPool(t, primary, standby, 500*time.Millisecond)
	for _, p := range []*postgres.ReadPool{patient, strict} {
		st := p.ReadStatus()
		require.True(t, st.Replica)
		require.True(t, st.OnReplica, "%+v", st)
		require.True(t, st.LagKnown)
		require.Equal(t, standby.Port(), serverPort(t, p.DB()))
	}

	// The replica stops replaying: it receives the next commit but does not
	// show it.
	_, err = sdb.ExecContext(t.Context(), `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	_, err = pdb.ExecContext(t.Context(), `INSERT INTO written VALUES (2)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { st := patient.ReadStatus(); return st.Lag > 0 }, 30*time.Second, 10*time.Millisecond,
		"the lag shows")
	require.Equal(t, 1, count(t, patient.DB()), "a read from the replica lags")
	require.True(t, patient.ReadStatus().OnReplica, "within its hour")

	require.Eventually(t, func() bool { return !strict.ReadStatus().OnReplica }, 30*time.Second, 10*time.Millisecond)
	st := strict.ReadStatus()
	require.Equal(t, "lagging", st.Reason)
	require.Greater(t, st.Lag, 500*time.Millisecond)
	require.Equal(t, primary.Port(), serverPort(t, strict.DB()), "the pooled connection to the replica was replaced")
	require.Equal(t, 2, count(t, strict.DB()), "the primary has it")

	_, err = sdb.ExecContext(t.Context(), `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strict.ReadStatus().OnReplica }, 30*time.Second, 10*time.Millisecond, "back")
	require.Equal(t, standby.Port(), serverPort(t, strict.DB()))
	require.Equal(t, 2, count(t, strict.DB()))

	// A replica that stops answering hands the reads to the primary.
	require.NoError(t, standby.Stop())
	require.Eventually(t, func() bool { return !strict.ReadStatus().OnReplica }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, "unreachable", strict.ReadStatus().Reason)
	require.False(t, strict.ReadStatus().LagKnown)
	require.Eventually(t, func() bool {
		var port int
		return strict.DB().GetContext(t.Context(), &port, `SELECT inet_server_port()`) == nil && port == primary.Port()
	}, 30*time.Second, 10*time.Millisecond, "reads on the primary")
}

// The use cases that only read run in read-only transactions: a write that
// slipped into one fails, even on the primary.
func TestReadOnlyTxRunnerRefusesWrites(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.NewDatabase(t), postgres.DefaultConnConfig())
	err := postgres.NewReadOnlyTxRunner(db).Run(t.Context(), submitIn)
	require.ErrorContains(t, err, "read-only transaction")
	require.NotErrorIs(t, err, ports.ErrUnavailable)
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n, `SELECT count(*) FROM tasks`))
	require.Zero(t, n)
	require.NoError(t, postgres.NewTxRunner(db).Run(t.Context(), submitIn), "the same on a read-write runner")
}
