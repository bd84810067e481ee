package postgres

import (
	"context"
	"database/sql/driver"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/migrations"
)

// MigrationLockKey is the pg_advisory_lock key Migrate holds while it runs ("tm_migra" in
// ASCII). Advisory locks are per database, so it only has to be unique within this schema.
const MigrationLockKey int64 = 0x746d5f6d69677261

// unlockTimeout bounds the release of the advisory lock, which must happen even after ctx ends.
const unlockTimeout = 10 * time.Second

// Migrate applies every migrations/*.sql not yet applied, in file-name order, each in its own
// transaction, recording it in schema_migrations(version text primary key, applied_at
// timestamptz default now()). It holds a session-level advisory lock (MigrationLockKey) on one
// dedicated connection for the whole run, so several instances starting at once apply each
// migration exactly once: the others wait, then find nothing left to do. That session runs
// without a statement timeout, and is closed when Migrate returns.
func Migrate(ctx context.Context, db *sqlx.DB) error {
	files, err := migrationFiles()
	if err != nil {
		return err
	}
	conn, err := db.Connx(ctx)
	if err != nil {
		return fmt.Errorf("migrate: get connection: %w", err)
	}
	defer conn.Close()
	// A migration, and the wait for another instance's, may take longer than
	// the pool's statement timeout allows any API statement: this session
	// lifts it, and is closed afterwards rather than pooled with it lifted.
	defer discard(conn)
	if _, err := conn.ExecContext(ctx, `SET statement_timeout = 0`); err != nil {
		return fmt.Errorf("migrate: lift the statement timeout: %w", err)
	}
	if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, MigrationLockKey); err != nil {
		discard(conn) // whether the lock was taken is unknown: never pool this session again
		return fmt.Errorf("migrate: take advisory lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
		if _, uerr := conn.ExecContext(uctx, `SELECT pg_advisory_unlock($1)`, MigrationLockKey); uerr != nil {
			// Closing the session releases the lock.
			discard(conn)
		}
	}()

	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    text        PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, conn)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, f := range files {
		if applied[f.version] {
			continue
		}
		if err := applyMigration(ctx, conn, f); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", f.name, err)
		}
	}
	return nil
}

// Pending reports the versions (file names without .sql) of the migrations not yet applied,
// in the order Migrate would apply them. Readiness checks use it.
func Pending(ctx context.Context, db *sqlx.DB) ([]string, error) {
	files, err := migrationFiles()
	if err != nil {
		return nil, err
	}
	var exists bool
	if err := db.GetContext(ctx, &exists, `SELECT to_regclass('schema_migrations') IS NOT NULL`); err != nil {
		return nil, fmt.Errorf("pending migrations: %w", err)
	}
	applied := map[string]bool{}
	if exists {
		if applied, err = appliedVersions(ctx, db); err != nil {
			return nil, fmt.Errorf("pending migrations: %w", err)
		}
	}
	var pending []string
	for _, f := range files {
		if !applied[f.version] {
			pending = append(pending, f.version)
		}
	}
	return pending, nil
}

// migrationFile is one embedded migration.
type migrationFile struct {
	name    string // "0001_init.sql"
	version string // "0001_init"
}

// migrationFiles lists the embedded migrations in file-name order.
func migrationFiles() ([]migrationFile, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(names)
	files := make([]migrationFile, 0, len(names))
	for _, name := range names {
		files = append(files, migrationFile{name: name, version: strings.TrimSuffix(name, ".sql")})
	}
	return files, nil
}

// appliedVersions returns the versions recorded in schema_migrations.
func appliedVersions(ctx context.Context, q sqlx.QueryerContext) (map[string]bool, error) {
	var versions []string
	if err := sqlx.SelectContext(ctx, q, &versions, `SELECT version FROM schema_migrations`); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", err)
	}
	applied := make(map[string]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// applyMigration runs one migration and records it, in one transaction.
func applyMigration(ctx context.Context, conn *sqlx.Conn, f migrationFile) error {
	body, err := fs.ReadFile(migrations.FS, f.name)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	tx, err := conn.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// Without arguments lib/pq uses the simple query protocol, which runs several statements.
	if _, err := tx.ExecContext(ctx, string(body)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, f.version); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// discard makes the pool close conn's session instead of reusing it.
func discard(conn *sqlx.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}
