// Package postgres implements the storage ports on PostgreSQL with sqlx and
// lib/pq: the transaction runner (which also appends each transaction's
// events to the Watermill SQL outbox), the task and worker stores, queue
// statistics, migrations and advisory locks.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // registers the "postgres" driver
)

// PoolConfig sizes the connection pool.
type PoolConfig struct {
	// MaxOpen is the most open connections (default 20).
	MaxOpen int
	// MaxIdle is the most idle connections kept (default MaxOpen).
	MaxIdle int
	// MaxLifetime recycles connections after this long (default 30 min).
	MaxLifetime time.Duration
}

// DefaultPoolConfig returns the pool defaults.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{MaxOpen: 20, MaxIdle: 20, MaxLifetime: 30 * time.Minute}
}

// Validate reports whether the pool config can be used.
func (c PoolConfig) Validate() error {
	if c.MaxOpen < 1 {
		return errors.New("pool max open connections must be at least 1")
	}
	return nil
}

// Open connects to url and checks the connection. Unless the URL says
// otherwise it turns on lib/pq's binary_parameters, which sends a
// parameterised statement's parse, bind and execute in one round trip
// instead of two; every statement of a transaction holds its connection
// for one round trip less.
func Open(ctx context.Context, url string, cfg PoolConfig) (*sqlx.DB, error) {
	db, err := sqlx.Open("postgres", withConnectTimeout(withBinaryParameters(url)))
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(cfg.MaxOpen)
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = cfg.MaxOpen
	}
	db.SetMaxIdleConns(cfg.MaxIdle)
	db.SetConnMaxLifetime(cfg.MaxLifetime)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return db, nil
}

// withBinaryParameters adds binary_parameters=yes to a postgres:// URL that
// does not set it (a key=value DSN is left as it is).
func withBinaryParameters(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || strings.Contains(u.RawQuery, "binary_parameters") {
		return dsn
	}
	q := u.Query()
	q.Set("binary_parameters", "yes")
	u.RawQuery = q.Encode()
	return u.String()
}
