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

// connectError is a failure to establish a connection (connectErrors
// marks them).
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// connectErrors wraps a driver connector so that the errors of Connect are
// marked as connectError. A failure to connect is a connection failure
// whatever its cause, bar a server that refused the connection for good:
// with several hosts, lib/pq joins each host's error, and one host
// refused while another is a standby ("server is in hot standby mode",
// which lib/pq reports as a plain error) is a primary not there yet.
type connectErrors struct{ driver.Connector }

// Connect implements driver.Connector.
func (c connectErrors) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, &connectError{err: err}
	}
	return conn, nil
}

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
