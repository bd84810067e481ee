package postgres

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/migrations"
)

// MigrationLockKey is the advisory lock key each migration's transaction holds ("tm_migra" in
// ASCII). Advisory locks are per database, so it only has to be unique within this schema.
const MigrationLockKey int64 = 0x746d5f6d69677261

// Migrate applies every migrations/*.sql not yet applied, in file-name order, each in its own
// transaction, recording it in schema_migrations(version text primary key, applied_at
// timestamptz default now()). Each transaction takes a transaction-level advisory lock
// (MigrationLockKey) and checks again, under it, that its migration is still to be applied, so
// several instances starting at once apply each migration exactly once: the others wait, then
// find it done. Nothing outlives a transaction (no session lock, no session setting: each lifts
// the statement timeout with SET LOCAL), so migrations run through a transaction-pooling
// PgBouncer as well as directly. When nothing is pending Migrate only reads.
func Migrate(ctx context.Context, db *sqlx.DB) error {
	pending, err := Pending(ctx, db)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if len(pending) == 0 {
		return nil
	}
	files, err := migrationFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		if !slices.Contains(pending, f.version) {
			continue
		}
		if err := applyMigration(ctx, db, f); err != nil {
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

// applyMigration runs one migration and records it, in one transaction, under the migration
// lock, unless another instance recorded it first.
func applyMigration(ctx context.Context, db *sqlx.DB, f migrationFile) error {
	body, err := fs.ReadFile(migrations.FS, f.name)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	tx, err := db.BeginTxx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// A migration, and the wait for another instance's, may take longer than the pool's
	// statement timeout allows any API statement: this transaction lifts it.
	if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
		return fmt.Errorf("lift the statement timeout: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, MigrationLockKey); err != nil {
		return fmt.Errorf("take advisory lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    text        PRIMARY KEY,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	applied, err := appliedVersions(ctx, tx)
	if err != nil {
		return err
	}
	if applied[f.version] {
		return nil // another instance applied it while this one waited
	}
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
