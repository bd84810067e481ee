package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/ports"
)

// replicaPair starts a primary and a synchronous hot standby streaming from
// it (every commit waits for the standby), on servers of the test's own (a
// failover must not touch the harness's shared server).
func replicaPair(t *testing.T) (primary, standby *localpg.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "primary"), Fast: true,
		ExtraSettings: map[string]string{"synchronous_standby_names": "standby", "synchronous_commit": "on"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() }) // an error once killed
	standby, err = localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "standby"), Fast: true, Primary: primary})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	return primary, standby
}

// serverPort is the port of the server a pool's connection reached.
func serverPort(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var port int
	require.NoError(t, db.GetContext(t.Context(), &port, `SELECT inet_server_port()`))
	return port
}

// With several hosts, Taskmaster connects to the first that accepts writes,
// wherever it is in the list, and a standby is never taken for it.
func TestOpenConnectsToTheWritableHostAmongSeveral(t *testing.T) {
	t.Parallel()
	primary, standby := replicaPair(t)
	both := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable", standby.Port(), primary.Port())
	keyValue := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable", standby.Port(), primary.Port())
	for _, dsn := range []string{both, keyValue} {
		db := open(t, dsn, postgres.DefaultConnConfig())
		require.Equal(t, primary.Port(), serverPort(t, db), "the primary, listed second: %s", dsn)
	}

	// The string's own target_session_attrs wins: "any" takes the first.
	db := open(t, both+"&target_session_attrs=any", postgres.DefaultConnConfig())
	require.Equal(t, standby.Port(), serverPort(t, db))

	// A standby alone is no primary: unavailable (503), not an error of
	// the request (500).
	onlyStandby := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", standby.Port())
	_, err := postgres.Open(t.Context(), onlyStandby, postgres.DefaultPoolConfig())
	require.ErrorContains(t, err, "hot standby")
	require.True(t, postgres.IsConnectionFailure(err), "%v", err)

	// A refused host and a standby: no primary yet, unavailable.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	_, err = postgres.Open(t.Context(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable",
		closed, standby.Port()), postgres.DefaultPoolConfig())
	require.Error(t, err)
	require.True(t, postgres.IsConnectionFailure(err), "%v", err)
	require.ErrorIs(t, postgres.TranslateError(err), ports.ErrUnavailable)

	// A host that refuses us for good (no such database) is a mistake
	// that waiting does not cure: not unavailable.
	_, err = postgres.Open(t.Context(), fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/nosuchdb?sslmode=disable",
		closed, primary.Port()), postgres.DefaultPoolConfig())
	require.ErrorContains(t, err, "nosuchdb")
	require.False(t, postgres.IsConnectionFailure(err), "%v", err)
}

// The failover in the small: the pool opened on both hosts follows the
// primary when the old one dies and the standby is promoted, with no
// change to its configuration.
func TestPoolFollowsThePromotedStandby(t *testing.T) {
	t.Parallel()
	primary, standby := replicaPair(t)
	db := open(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable",
		primary.Port(), standby.Port()), postgres.DefaultConnConfig())
	_, err := db.ExecContext(t.Context(), `CREATE TABLE written (id int)`)
	require.NoError(t, err)
	require.Equal(t, primary.Port(), serverPort(t, db))

	require.NoError(t, primary.Kill())
	// Until the standby is promoted, nothing takes writes: unavailable.
	err = postgres.NewTxRunner(db).Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		var port int
		if err := postgres.TxOf(st).GetContext(ctx, &port, `SELECT inet_server_port()`); err != nil {
			return err
		}
		_, err := postgres.TxOf(st).ExecContext(ctx, `INSERT INTO written VALUES (1)`)
		return fmt.Errorf("wrote on the server at %d (primary %d, standby %d): %w", port, primary.Port(), standby.Port(), err)
	})
	require.ErrorIs(t, err, ports.ErrUnavailable)

	require.NoError(t, standby.Promote(t.Context()))
	var last error
	require.Eventually(t, func() bool {
		_, last = db.ExecContext(t.Context(), `INSERT INTO written VALUES (2)`)
		return last == nil
	}, 30*time.Second, 10*time.Millisecond, "the pool reaches the new primary: %v", &last)
	require.Equal(t, standby.Port(), serverPort(t, db))
}

// connect_timeout applies to each host in turn (libpq's rule): a first host
// that accepts TCP connections and never answers costs connect_timeout,
// then the next host is tried. Were it one budget for the whole list, the
// first host would spend it all.
func TestConnectTimeoutAppliesToEachHost(t *testing.T) {
	t.Parallel()
	silent, accepted := silentServer(t)
	primary, _ := replicaPair(t)
	db := open(t, fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable connect_timeout=1",
		silent, primary.Port()), postgres.DefaultConnConfig())
	require.Equal(t, primary.Port(), serverPort(t, db))
	require.Positive(t, accepted.Load(), "the silent host was tried first")
}

// Every new connection dials the host by its name, so a name that a
// failover manager moves to the new primary is followed: nothing between
// the configuration and the dialer resolves it once and keeps the address
// (and Go's resolver keeps no cache).
func TestEveryNewConnectionDialsTheHostName(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.NewDatabase(t))
	require.NoError(t, err)
	u.Host = "localhost:" + u.Port()
	dsn, err := postgres.DefaultConnConfig().DSN(u.String())
	require.NoError(t, err)
	connector, err := pq.NewConnector(dsn)
	require.NoError(t, err)
	dialed := &recordingDialer{dial: postgres.DefaultConnConfig().Dialer().(postgres.DialFunc)}
	connector.Dialer(postgres.DialFunc(dialed.dialContext))
	db := sql.OpenDB(connector)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxIdleConns(0) // every statement on a new connection
	for range 3 {
		_, err := db.ExecContext(t.Context(), `SELECT 1`)
		require.NoError(t, err)
	}
	require.Equal(t, []string{u.Host, u.Host, u.Host}, dialed.addresses())
}

// recordingDialer notes the address of every dial.
type recordingDialer struct {
	dial postgres.DialFunc
	mu   sync.Mutex
	seen []string
}

func (d *recordingDialer) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.seen = append(d.seen, address)
	d.mu.Unlock()
	return d.dial(ctx, network, address)
}

func (d *recordingDialer) addresses() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.seen...)
}

// silentServer listens on a port, accepts connections and never answers;
// it returns the port and the count of connections accepted.
func silentServer(t *testing.T) (int, *atomic.Int64) {
	t.Helper()
	var (
		accepted atomic.Int64
		held     []net.Conn
	)
	t.Cleanup(func() { // runs after acceptEach's, which waits for the last accept
		for _, c := range held {
			_ = c.Close()
		}
	})
	port := acceptEach(t, func(c net.Conn) {
		accepted.Add(1)
		held = append(held, c)
	})
	return port, &accepted
}

// acceptEach listens on a port and hands every connection it accepts to
// handle, one after another, until the test ends; it returns the port.
func acceptEach(t *testing.T, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// A server that became a standby under a pooled connection (a pooler that
// keeps its client connections, repointed by a failover manager to a node
// that is now a standby): the write is refused at BEGIN, the connection is
// dropped and the transaction run again on a new one, which goes to the host
// that takes writes; with no such host, it is unavailable (503), never an
// error of the request (500).
func TestAWriteOnAServerThatBecameAStandbyMovesToTheWritableHost(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, standby := replicaPair(t)
	bouncer, err := localpg.StartPgBouncer(ctx, localpg.BouncerConfig{Dir: t.TempDir(), ServerPort: primary.Port(), PoolSize: 2})
	require.NoError(t, err)
	t.Cleanup(bouncer.Stop)
	_, err = open(t, primary.URL("postgres"), postgres.DefaultConnConfig()).ExecContext(ctx, `CREATE TABLE written (id int)`)
	require.NoError(t, err)
	insert := func(ctx context.Context, st ports.Stores) error {
		_, err := postgres.TxOf(st).ExecContext(ctx, `INSERT INTO written VALUES (1)`)
		return err
	}
	// Through the pooler first, the primary directly second.
	noCache := func(url string) *sqlx.DB {
		db, err := postgres.Open(ctx, url, postgres.PoolConfig{MaxOpen: 2, Conn: postgres.DefaultConnConfig(), StatementCacheSize: -1})
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	both := noCache(fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable", bouncer.Port(), primary.Port()))
	onlyBouncer := noCache(bouncer.URL("postgres"))
	require.NoError(t, postgres.NewTxRunner(both).Run(ctx, insert))
	require.NoError(t, postgres.NewTxRunner(onlyBouncer).Run(ctx, insert))

	// The pooler now pools to the standby; the client connections stay.
	require.NoError(t, bouncer.PointAt(ctx, standby.Port()))
	err = postgres.NewTxRunner(onlyBouncer).Run(ctx, insert)
	require.ErrorIs(t, err, ports.ErrUnavailable, "no host takes writes: %v", err)
	require.NoError(t, postgres.NewTxRunner(both).Run(ctx, insert), "run again on the host that takes writes")
	require.Equal(t, primary.Port(), serverPort(t, both))
	var n int
	require.NoError(t, open(t, primary.URL("postgres"), postgres.ConnConfig{}).GetContext(ctx, &n, `SELECT count(*) FROM written`))
	require.Equal(t, 3, n)
}

// While no host takes writes, requests do not become connection attempts:
// each attempt on a standby forks a backend there that logs in only to be
// dropped (target_session_attrs), and a pool under load made hundreds a
// second, until the standby ran out of connection slots and refused its
// failover manager too. Once an attempt failed, the pool makes one at a
// time, about ten a second, and refuses the requests meanwhile at once, as
// unavailable; once the standby is promoted the pool reaches it.
func TestAPoolDoesNotStormTheStandbyWhileNoHostTakesWrites(t *testing.T) {
	t.Parallel()
	primary, standby := replicaPair(t)
	fw := forward(t, standby.Port())
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable", primary.Port(), fw.port)
	db := open(t, url, postgres.DefaultConnConfig())
	require.Equal(t, primary.Port(), serverPort(t, db))
	require.NoError(t, primary.Kill())

	const hammerFor = 2 * time.Second
	before := fw.accepted.Load()
	var (
		wg       sync.WaitGroup
		requests atomic.Int64
	)
	until := time.Now().Add(hammerFor)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) {
				_, err := db.ExecContext(t.Context(), `SELECT 1`)
				requests.Add(1)
				if !assert.Error(t, err) || !assert.True(t, postgres.IsConnectionFailure(err), "%v", err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	attempts := fw.accepted.Load() - before
	t.Logf("%d requests in %v made %d connection attempts on the standby, at most %d at once",
		requests.Load(), hammerFor, attempts, fw.maxOpen.Load())
	require.Greater(t, requests.Load(), int64(1000), "refused at once")
	// The pool's first attempts at once (up to its size, 4), then delays of
	// 10, 20, 40, 80 ms and 100 ms after each failure: about 25 in two
	// seconds.
	require.LessOrEqual(t, attempts, int64(32))
	require.LessOrEqual(t, fw.maxOpen.Load(), int64(4))

	require.NoError(t, standby.Promote(t.Context()))
	require.Eventually(t, func() bool {
		other, err := postgres.Open(t.Context(), url, postgres.PoolConfig{MaxOpen: 1, Conn: postgres.DefaultConnConfig()})
		if err == nil {
			_ = other.Close()
		}
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the standby takes writes")
	var last error
	require.Eventually(t, func() bool {
		_, last = db.ExecContext(t.Context(), `SELECT 1`)
		return last == nil
	}, 5*time.Second, time.Millisecond, "the pool reaches the new primary: %v", &last)
	require.Equal(t, standby.Port(), serverPort(t, db))
}

// forwarded counts the connections a forwarder accepted, and the most it
// held open at once.
type forwarded struct {
	port              int
	accepted, maxOpen atomic.Int64
	open              atomic.Int64
}

// forward listens on a port and pipes every connection to the local server
// at target.
func forward(t *testing.T, target int) *forwarded {
	t.Helper()
	f := &forwarded{}
	f.port = acceptEach(t, func(c net.Conn) {
		f.accepted.Add(1)
		n := f.open.Add(1)
		for m := f.maxOpen.Load(); n > m && !f.maxOpen.CompareAndSwap(m, n); m = f.maxOpen.Load() {
		}
		go func() {
			// Open until the client closes its side (or the server its).
			var closed sync.Once
			done := func() { closed.Do(func() { f.open.Add(-1) }) }
			defer done()
			defer c.Close()
			s, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", target))
			if err != nil {
				return
			}
			defer s.Close()
			go func() {
				_, _ = io.Copy(s, c)
				done()
				_ = s.Close()
			}()
			_, _ = io.Copy(c, s)
		}()
	})
	return f
}

// preferSSLThroughAForwarder returns the URL of a fresh database of the
// harness's server (which has no SSL) with sslmode=prefer, reached through
// a forwarder that counts the sockets.
func preferSSLThroughAForwarder(t *testing.T) (string, *forwarded) {
	t.Helper()
	u, err := url.Parse(pgtest.NewDatabase(t))
	require.NoError(t, err)
	var port int
	_, err = fmt.Sscan(u.Port(), &port)
	require.NoError(t, err)
	fw := forward(t, port)
	u.Host = fmt.Sprintf("127.0.0.1:%d", fw.port)
	q := u.Query()
	q.Set("sslmode", "prefer")
	u.RawQuery = q.Encode()
	return u.String(), fw
}

// lib/pq (1.12) falls back from sslmode=prefer (pg_auto_failover's URIs
// say it) to a plain connection by dialing again, without closing the
// socket whose SSL request the server declined: the server's backend then
// waits for a startup packet until authentication_timeout (a minute),
// holding a connection slot. Every new connection to a server without SSL
// left one behind, hundreds during an outage. The pool closes what an
// attempt to connect abandoned.
func TestConnectingWithSSLPreferredLeavesNoSocketBehind(t *testing.T) {
	t.Parallel()
	u, fw := preferSSLThroughAForwarder(t)
	db, err := postgres.Open(t.Context(), u, postgres.PoolConfig{MaxOpen: 1, Conn: postgres.DefaultConnConfig()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxIdleConns(0) // every statement on a new connection
	const n = 20
	for range n {
		_, err := db.ExecContext(t.Context(), `SELECT 1`)
		require.NoError(t, err)
	}
	require.Equal(t, int64(2*(n+1)), fw.accepted.Load(), "two sockets per connection (Open's and n more): the SSL request, then the plain one")
	require.Eventually(t, func() bool { return fw.open.Load() == 0 }, 5*time.Second, 10*time.Millisecond,
		"sockets left open: %d", fw.open.Load())
}

// The notifier's listener holds one connection at a time: its dialer closes
// what it dialed before whenever it dials again, so that the fallback from
// sslmode=prefer leaves nothing open there either, reconnection after
// reconnection.
func TestTheOneConnectionDialerClosesWhatItDialedBefore(t *testing.T) {
	t.Parallel()
	u, fw := preferSSLThroughAForwarder(t)
	dsn, err := postgres.DefaultConnConfig().DSN(u)
	require.NoError(t, err)

	d := postgres.DefaultConnConfig().OneConnDialer()
	for i := range 5 {
		conn, err := pq.DialOpen(d, dsn)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return fw.open.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
			"connection %d: %d sockets open, the one in use only", i, fw.open.Load())
		require.NoError(t, conn.Close())
	}
	require.Equal(t, int64(10), fw.accepted.Load())
}
