package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"

	"github.com/taskmaster/taskmaster/ports"
)

// unavailableCodes are the SQLSTATEs, besides class 08 (connection
// exception), that say the server cannot serve the session now rather than
// that the statement is wrong: it is shutting down, starting up, out of
// connection slots, or it ended the session or statement on a timeout.
var unavailableCodes = map[pqerror.Code]bool{
	pqerror.AdminShutdown:                   true, // 57P01: fast or smart shutdown ended the session
	pqerror.CrashShutdown:                   true, // 57P02: another backend crashed; the server restarts
	pqerror.CannotConnectNow:                true, // 57P03: starting up, shutting down, in recovery
	pqerror.IdleSessionTimeout:              true, // 57P05
	pqerror.IdleInTransactionSessionTimeout: true, // 25P03
	pqerror.QueryCanceled:                   true, // 57014: statement_timeout or an operator's cancel
	pqerror.TooManyConnections:              true, // 53300
}

// TranslateError marks err with ports.ErrUnavailable when it says the
// database could not be reached or the connection broke (see
// IsConnectionFailure), and returns any other error unchanged. Every method
// of this adapter that talks to the database returns its errors through it,
// and so does any other adapter that reads the database with its own
// connection (the event feed).
func TranslateError(err error) error {
	if err == nil || errors.Is(err, ports.ErrUnavailable) || !IsConnectionFailure(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ports.ErrUnavailable, err)
}

// IsConnectionFailure reports whether err is a failure to reach PostgreSQL
// or to keep the connection, as opposed to an error in a statement:
//   - a server error of class 08, or one of unavailableCodes;
//   - driver.ErrBadConn (lib/pq returns it for FATAL errors such as the
//     57P01 every session gets on a fast shutdown, and for io.EOF), and
//     sql.ErrConnDone;
//   - io.EOF and io.ErrUnexpectedEOF (the server closed the socket);
//   - any net.Error (refused, reset, broken pipe, dial and read timeouts,
//     including connect_timeout), and the errno values behind them;
//   - context.DeadlineExceeded (a deadline ran out waiting on the database;
//     a cancelled context is the caller's own doing and is not included).
func IsConnectionFailure(err error) bool {
	if err == nil {
		return false
	}
	var connect *connectError
	if errors.As(err, &connect) {
		return !refusedForGood(connect.err)
	}
	var readOnly *readOnlyServerError
	if errors.As(err, &readOnly) {
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code.Class() == pqerror.ClassConnectionException || unavailableCodes[pqErr.Code]
	}
	var netErr net.Error
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return true
	case errors.As(err, &netErr):
		return true
	}
	return false
}

// connectError is a failure to establish a connection (connectGate
// marks them).
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// A failure to connect (connectGate marks them) is a connection failure
// whatever its cause, bar a server that refused the connection for good:
// with several hosts, lib/pq joins each host's error, and one host
// refused while another is a standby ("server is in hot standby mode",
// which lib/pq reports as a plain error) is a primary not there yet.

// refusedForGood reports whether a server answered an attempt to connect
// with an error that waiting does not cure, such as a failed authentication
// (class 28), a database that does not exist (3D000) or an unknown run-time
// parameter (42704): a mistake in the configuration, which stays a 500 and is
// logged.
func refusedForGood(err error) bool {
	found := false
	walkErrors(err, func(e error) {
		if pqErr, ok := e.(*pq.Error); ok && pqErr.Code.Class() != pqerror.ClassConnectionException && !unavailableCodes[pqErr.Code] {
			found = true
		}
	})
	return found
}

// walkErrors calls fn on err and every error it wraps, joined ones
// included.
func walkErrors(err error, fn func(error)) {
	if err == nil {
		return
	}
	fn(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, fn)
		}
	}
}

// isStaleConnection reports whether err says that an established connection
// had been closed by the other end (the server ended the session, or the
// socket was reset), as pooled connections are after a database restart.
// A new connection may well work. A failure to connect is not included:
// trying again at once would only fail again.
func isStaleConnection(err error) bool {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case pqerror.AdminShutdown, pqerror.CrashShutdown, pqerror.IdleSessionTimeout, pqerror.IdleInTransactionSessionTimeout:
			return true
		}
		return false
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readOnlyServerError is a write refused because the connection's server is
// a standby now: a read-write transaction refused at BEGIN ("cannot set
// transaction read-write mode during recovery", 0A000 from
// check_transaction_read_only), or a write outside a read-only transaction
// refused (25006). It was demoted under the connection, as after a
// switchover behind a pooler that keeps client connections. It is a
// connection failure: the connection is dropped, and the next one goes to
// the primary (target_session_attrs).
type readOnlyServerError struct{ err error }

func (e *readOnlyServerError) Error() string { return "the server takes no writes: " + e.err.Error() }
func (e *readOnlyServerError) Unwrap() error { return e.err }

// guardedConn is a pool connection that notices its server stopped taking
// writes (readOnlyServerError) and is then not used again.
type guardedConn struct {
	innerConn
	// readOnlyTx: the open transaction was begun READ ONLY, so a 25006 in
	// it is the caller's mistake, not the server's change.
	readOnlyTx bool
	bad        bool
}

func guard(conn driver.Conn) (driver.Conn, error) {
	inner, ok := conn.(innerConn)
	if !ok {
		return conn, nil
	}
	return &guardedConn{innerConn: inner}, nil
}

// BeginTx implements driver.ConnBeginTx.
func (c *guardedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.readOnlyTx = opts.ReadOnly
	tx, err := c.innerConn.BeginTx(ctx, opts)
	var pqErr *pq.Error
	// "cannot set transaction read-write mode during recovery" comes as a
	// generic 0A000 from the setting's check: ask the server what it is.
	if err != nil && !opts.ReadOnly && errors.As(err, &pqErr) && pqErr.Code == pqerror.FeatureNotSupported && c.inRecovery(ctx) {
		c.bad = true
		return nil, &readOnlyServerError{err: err}
	}
	return tx, err
}

// inRecovery reports whether the connection's server is a standby (false
// when it cannot tell).
func (c *guardedConn) inRecovery(ctx context.Context) bool {
	rows, err := c.innerConn.QueryContext(ctx, `SELECT pg_is_in_recovery()`, nil)
	if err != nil {
		return false
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if rows.Next(v) != nil {
		return false
	}
	b, ok := v[0].(bool)
	return ok && b
}

// ExecContext implements driver.ExecerContext.
func (c *guardedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.innerConn.ExecContext(ctx, query, args)
	return res, c.check(err)
}

// QueryContext implements driver.QueryerContext.
func (c *guardedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.innerConn.QueryContext(ctx, query, args)
	return rows, c.check(err)
}

func (c *guardedConn) check(err error) error {
	var pqErr *pq.Error
	if err != nil && !c.readOnlyTx && errors.As(err, &pqErr) && pqErr.Code == pqerror.ReadOnlySQLTransaction {
		c.bad = true
		return &readOnlyServerError{err: err}
	}
	return err
}

// ResetSession implements driver.SessionResetter.
func (c *guardedConn) ResetSession(ctx context.Context) error {
	if c.bad {
		return driver.ErrBadConn
	}
	c.readOnlyTx = false
	return c.innerConn.ResetSession(ctx)
}

// IsValid implements driver.Validator.
func (c *guardedConn) IsValid() bool { return !c.bad && c.innerConn.IsValid() }

// guardingConnector wraps each connection of its connector in a guardedConn.
type guardingConnector struct{ driver.Connector }

// Connect implements driver.Connector.
func (c guardingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return guard(conn)
}
