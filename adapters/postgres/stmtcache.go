package postgres

import (
	"container/list"
	"context"
	"database/sql/driver"
	"errors"
	"reflect"

	"github.com/lib/pq"
)

// Per-connection prepared statements.
//
// lib/pq sends every parameterised statement unnamed, so PostgreSQL parses
// and plans it every time; for the claim statement planning costs about as
// much as running it (docs/performance.md). A statement cache on the pool
// (database/sql's Stmt) deadlocked once every connection was inside a
// transaction waiting for a preparation. This cache lives below
// database/sql instead: every driver connection keeps the statements it has
// prepared, by text, and prepares a new one on itself, in the transaction
// that needs it, so it never waits for another connection. It is
// transparent to database/sql, sqlx and watermill-sql: a query with
// arguments runs as Bind+Execute of the connection's named statement (one
// round trip, like lib/pq's binary_parameters path), with the same
// parameter encoding and the same results (lib/pq decodes the columns it
// receives in binary, integers and uuids, to the values the text protocol
// gives). Statements without arguments (BEGIN, COMMIT, SET LOCAL) go as
// they are.
//
// PostgreSQL plans a prepared statement's first five executions for their
// parameters, and then keeps a generic plan if it costs no more. The claim
// statement pins its plan's shape for that reason (see TaskStore.Claim).

// DefaultStatementCacheSize is how many prepared statements a connection
// keeps unless configured; the least recently used one is closed past it.
// Taskmaster runs a few dozen distinct statements.
const DefaultStatementCacheSize = 256

// NewCachingConnector wraps a driver connector so that each of its
// connections keeps up to size prepared statements.
func NewCachingConnector(inner driver.Connector, size int) driver.Connector {
	if size <= 0 {
		size = DefaultStatementCacheSize
	}
	return &cachingConnector{inner: inner, size: size}
}

type cachingConnector struct {
	inner driver.Connector
	size  int
}

func (c *cachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &cachingConn{inner: conn, size: c.size, byText: make(map[string]*list.Element), lru: list.New()}, nil
}

func (c *cachingConnector) Driver() driver.Driver { return c.inner.Driver() }

// innerConn is what lib/pq's connection implements and the cache forwards.
type innerConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.QueryerContext
	driver.ExecerContext
	driver.NamedValueChecker
	driver.SessionResetter
	driver.Validator
	driver.Pinger
}

var _ innerConn = (*cachingConn)(nil)

// cachingConn is one connection and its prepared statements. database/sql
// uses a connection from one goroutine at a time, so it needs no lock.
type cachingConn struct {
	inner  driver.Conn
	size   int
	byText map[string]*list.Element // of *cachedStmt
	lru    *list.List               // most recently used first
	// bad is set when a context ended during a call on a prepared statement:
	// lib/pq then sent a cancel request that may still arrive, so the
	// connection is not used again (lib/pq does the same for unnamed
	// statements).
	bad bool
	// rowsOpen is set while a result of a prepared statement is being read:
	// nothing else may be sent on the connection meanwhile.
	rowsOpen bool
}

type cachedStmt struct {
	text string
	stmt driver.Stmt
}

// errRowsOpen is returned for a statement sent while another's rows are
// still being read (lib/pq's unnamed statements refuse it the same way).
var errRowsOpen = errors.New("pq: there is already a query being processed on this connection")

// stmt returns the connection's prepared statement for text, preparing it
// (one round trip: Parse and Describe) when it has none.
func (c *cachingConn) stmt(ctx context.Context, text string) (driver.Stmt, error) {
	if el, ok := c.byText[text]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*cachedStmt).stmt, nil
	}
	st, err := c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, text)
	if err != nil {
		return nil, err
	}
	c.byText[text] = c.lru.PushFront(&cachedStmt{text: text, stmt: st})
	for c.lru.Len() > c.size {
		c.evict(c.lru.Back())
	}
	return st, nil
}

// evict forgets a statement and closes it on the server (one round trip).
func (c *cachingConn) evict(el *list.Element) {
	cs := el.Value.(*cachedStmt)
	c.lru.Remove(el)
	delete(c.byText, cs.text)
	_ = cs.stmt.Close() // a failure marks the connection bad in lib/pq
}

// afterError drops a statement the server no longer accepts as prepared: a
// schema change altered its result (0A000 "cached plan must not change
// result type") or it is gone (26000). The statement's transaction failed;
// the next use prepares it again.
func (c *cachingConn) afterError(text string, err error) {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) {
		return
	}
	if pqErr.Code == "0A000" || pqErr.Code == "26000" {
		if el, ok := c.byText[text]; ok {
			cs := el.Value.(*cachedStmt)
			c.lru.Remove(el)
			delete(c.byText, text)
			if pqErr.Code == "0A000" {
				_ = cs.stmt.Close()
			}
		}
	}
}

// ExecContext implements driver.ExecerContext.
func (c *cachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if len(args) == 0 {
		return c.inner.(driver.ExecerContext).ExecContext(ctx, query, args)
	}
	if c.rowsOpen {
		return nil, errRowsOpen
	}
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	res, err := st.(driver.StmtExecContext).ExecContext(ctx, args)
	if ctx.Err() != nil {
		c.bad = true
	}
	if err != nil {
		c.afterError(query, err)
	}
	return res, err
}

// QueryContext implements driver.QueryerContext.
func (c *cachingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if len(args) == 0 {
		return c.inner.(driver.QueryerContext).QueryContext(ctx, query, args)
	}
	if c.rowsOpen {
		return nil, errRowsOpen
	}
	st, err := c.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	rows, err := st.(driver.StmtQueryContext).QueryContext(ctx, args)
	if err != nil {
		if ctx.Err() != nil {
			c.bad = true
		}
		c.afterError(query, err)
		return nil, err
	}
	c.rowsOpen = true
	return &cachedRows{Rows: rows, conn: c, ctx: ctx}, nil
}

// cachedRows ends the connection's busy state when closed.
type cachedRows struct {
	driver.Rows
	conn   *cachingConn
	ctx    context.Context
	closed bool
}

func (r *cachedRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.Rows.Close()
	r.conn.rowsOpen = false
	if r.ctx.Err() != nil {
		r.conn.bad = true
	}
	return err
}

// The optional row interfaces forward to lib/pq's rows.

func (r *cachedRows) ColumnTypeScanType(i int) reflect.Type {
	if t, ok := r.Rows.(driver.RowsColumnTypeScanType); ok {
		return t.ColumnTypeScanType(i)
	}
	return reflect.TypeFor[any]()
}

func (r *cachedRows) ColumnTypeDatabaseTypeName(i int) string {
	if t, ok := r.Rows.(driver.RowsColumnTypeDatabaseTypeName); ok {
		return t.ColumnTypeDatabaseTypeName(i)
	}
	return ""
}

func (r *cachedRows) ColumnTypeLength(i int) (int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypeLength); ok {
		return t.ColumnTypeLength(i)
	}
	return 0, false
}

func (r *cachedRows) ColumnTypePrecisionScale(i int) (int64, int64, bool) {
	if t, ok := r.Rows.(driver.RowsColumnTypePrecisionScale); ok {
		return t.ColumnTypePrecisionScale(i)
	}
	return 0, 0, false
}

func (r *cachedRows) HasNextResultSet() bool {
	n, ok := r.Rows.(driver.RowsNextResultSet)
	return ok && n.HasNextResultSet()
}

func (r *cachedRows) NextResultSet() error {
	if n, ok := r.Rows.(driver.RowsNextResultSet); ok {
		return n.NextResultSet()
	}
	return errors.New("pq: no more result sets")
}

// Prepare implements driver.Conn: an explicit preparation is the caller's
// to close, so it is not cached.
func (c *cachingConn) Prepare(query string) (driver.Stmt, error) { return c.inner.Prepare(query) }

// PrepareContext implements driver.ConnPrepareContext (not cached either).
func (c *cachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.inner.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

// Close implements driver.Conn; the statements end with the connection.
func (c *cachingConn) Close() error { return c.inner.Close() }

// Begin implements driver.Conn.
func (c *cachingConn) Begin() (driver.Tx, error) { return c.inner.Begin() } //nolint:staticcheck // part of driver.Conn

// BeginTx implements driver.ConnBeginTx.
func (c *cachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.inner.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

// CheckNamedValue implements driver.NamedValueChecker (lib/pq converts
// slices to arrays there).
func (c *cachingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.inner.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// ResetSession implements driver.SessionResetter.
func (c *cachingConn) ResetSession(ctx context.Context) error {
	if c.bad {
		return driver.ErrBadConn
	}
	return c.inner.(driver.SessionResetter).ResetSession(ctx)
}

// IsValid implements driver.Validator.
func (c *cachingConn) IsValid() bool {
	return !c.bad && c.inner.(driver.Validator).IsValid()
}

// Ping implements driver.Pinger.
func (c *cachingConn) Ping(ctx context.Context) error {
	return c.inner.(driver.Pinger).Ping(ctx)
}
