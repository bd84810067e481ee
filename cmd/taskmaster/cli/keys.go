package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/apikey"
)

// `taskmaster keys create|list|revoke` manages API keys in one of two
// places:
//
//   - on the database, when --database-url (default
//     $TASKMASTER_DATABASE_URL) is set: no server and no key needed, so
//     this is how the first admin key is made. Migrations are applied first.
//   - on a server (--url, $TASKMASTER_URL) otherwise, through the admin API
//     with an admin key ($TASKMASTER_API_KEY).
//
// Either way the actions are audited in the outbox (audit.key_created,
// audit.key_revoked; without a key id when done on the database).

// keyStore is where the keys command works.
type keyStore interface {
	create(ctx context.Context, p client.CreateKeyParams) (*client.CreatedKey, error)
	list(ctx context.Context) ([]client.Key, error)
	revoke(ctx context.Context, id string) (*client.Key, error)
	// usable reports whether token names a key that still works.
	usable(ctx context.Context, id, token string) (bool, error)
	close()
}

const keysUsage = `usage:
  taskmaster keys create --name N --scope S[,S] [--queues Q[,Q]] [--worker-prefix P] [--expires 30d] [--json] [--out FILE]
  taskmaster keys list [--json]
  taskmaster keys revoke ID [--json]

Scopes: admin, produce, work, read. With --database-url (default
$TASKMASTER_DATABASE_URL) the command works on the database directly (how
the first admin key is made); otherwise on the server at --url (default
$TASKMASTER_URL) with an admin key in $TASKMASTER_API_KEY.`

type keysFlags struct {
	url, databaseURL string
	json             bool
	name             string
	scopes, queues   multiFlag
	workerPrefix     string
	expires          string
	out              string
}

// runKeys runs `taskmaster keys SUBCOMMAND ...`.
func runKeys(ctx context.Context, args []string, io IO) error {
	sub, fs, done, err := subcommand("keys", keysUsage, args, io)
	if done {
		return err
	}
	var f keysFlags
	fs.StringVar(&f.url, "url", defaultURL(io), "Taskmaster base URL (env TASKMASTER_URL), when no database URL is given")
	fs.StringVar(&f.databaseURL, "database-url", io.Getenv("TASKMASTER_DATABASE_URL"), "work on this database directly (env TASKMASTER_DATABASE_URL)")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of text")
	nargs := 0
	switch sub {
	case "create":
		fs.StringVar(&f.name, "name", "", "the key's name, for people (required)")
		fs.Var(&f.scopes, "scope", "admin, produce, work or read (repeatable, or comma-separated; required)")
		fs.Var(&f.queues, "queues", "limit the key to these queues; a trailing * makes a prefix, e.g. emails-* (repeatable, or comma-separated)")
		fs.StringVar(&f.workerPrefix, "worker-prefix", "", "limit a work key to worker ids that start with this")
		fs.StringVar(&f.expires, "expires", "", "expire the key this long after its creation (s, m, h or d: 30d)")
		fs.StringVar(&f.out, "out", "", "write {\"id\",\"key\"} to this file (mode 0600) instead of printing the token; "+
			"when the file already names a usable key, create nothing")
	case "list":
	case "revoke":
		nargs = 1
	default:
		return usagef("unknown keys command %q\n%s", sub, keysUsage)
	}
	positional, done, err := parseArgs(fs, args[1:], nargs, keysUsage)
	if done || err != nil {
		return err
	}
	store, err := openKeyStore(ctx, f, io)
	if err != nil {
		return err
	}
	defer store.close()
	switch sub {
	case "create":
		err = keysCreate(ctx, store, f, io)
	case "list":
		err = keysList(ctx, store, f, io)
	default:
		err = keysRevoke(ctx, store, positional[0], f, io)
	}
	if err != nil {
		return &plainError{err: err}
	}
	return nil
}

func openKeyStore(ctx context.Context, f keysFlags, io IO) (keyStore, error) {
	if f.databaseURL != "" {
		return openDatabaseKeys(ctx, f.databaseURL)
	}
	c, err := client.New(f.url, client.WithUserAgent("taskmaster-cli/1"), client.WithAPIKey(io.Getenv(client.EnvAPIKey)))
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return serverKeys{c: c}, nil
}

func keysCreate(ctx context.Context, store keyStore, f keysFlags, io IO) error {
	if f.name == "" || len(f.scopes) == 0 {
		return usagef("keys create: --name and --scope are required\n%s", keysUsage)
	}
	p := client.CreateKeyParams{Name: f.name, Scopes: f.scopes, Queues: f.queues, WorkerPrefix: f.workerPrefix}
	if f.expires != "" {
		d, err := app.ParseTTL(f.expires)
		if err != nil || d < time.Second {
			return usagef("keys create: --expires must be a duration of at least 1s, such as 30d or 12h")
		}
		p.ExpiresIn = d
	}
	if f.out != "" {
		if id, ok := existingKey(ctx, store, f.out); ok {
			fmt.Fprintf(io.Stderr, "%s already holds key %s, which still works: nothing created\n", f.out, id)
			return nil
		}
	}
	k, err := store.create(ctx, p)
	if err != nil {
		return err
	}
	secret := struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}{k.ID, k.Token}
	if f.out != "" {
		if err := writeSecret(f.out, secret); err != nil {
			return fmt.Errorf("key %s was created but could not be saved (revoke it): %w", k.ID, err)
		}
		fmt.Fprintf(io.Stderr, "created key %s (%s, scopes %s); its token is in %s\n", k.ID, k.Name, strings.Join(k.Scopes, ","), f.out)
		return nil
	}
	if f.json {
		return printJSON(io.Stdout, secret)
	}
	_, err = fmt.Fprintf(io.Stdout, "Created key %s (%s, scopes %s).\nIts token is shown only now; keep it secret (for example as TASKMASTER_API_KEY):\n%s\n",
		k.ID, k.Name, strings.Join(k.Scopes, ","), k.Token)
	return err
}

// existingKey reads a file written by --out and reports whether the key it
// holds still works.
func existingKey(ctx context.Context, store keyStore, path string) (string, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	var saved struct {
		ID  string `json:"id"`
		Key string `json:"key"`
	}
	if json.Unmarshal(raw, &saved) != nil || saved.Key == "" {
		return "", false
	}
	ok, err := store.usable(ctx, saved.ID, saved.Key)
	return saved.ID, err == nil && ok
}

// writeSecret writes v as JSON to path, readable by its owner only, and
// atomically (a reader never sees half a file).
func writeSecret(path string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".taskmaster-key-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, nothing is there
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func keysList(ctx context.Context, store keyStore, f keysFlags, io IO) error {
	ks, err := store.list(ctx)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(io.Stdout, map[string]any{"keys": nonNil(ks)})
	}
	tw := table(io.Stdout)
	fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tQUEUES\tWORKER PREFIX\tSTATE\tCREATED\tLAST USED\tEXPIRES")
	for _, k := range ks {
		prefix := ""
		if k.WorkerPrefix != nil {
			prefix = *k.WorkerPrefix
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, strings.Join(k.Scopes, ","),
			orText(strings.Join(k.Queues, ","), "(any)"), orDash(prefix), keyState(k), when(&k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
	}
	return tw.Flush()
}

// keyState says whether a key works, as of this machine's clock (for a
// listing only: the server judges expiry on the database clock).
func keyState(k client.Key) string {
	switch {
	case k.RevokedAt != nil:
		return "revoked"
	case k.ExpiresAt != nil && !time.Now().Before(*k.ExpiresAt):
		return "expired"
	default:
		return "active"
	}
}

func keysRevoke(ctx context.Context, store keyStore, id string, f keysFlags, io IO) error {
	k, err := store.revoke(ctx, id)
	if err != nil {
		return err
	}
	if f.json {
		return printJSON(io.Stdout, k)
	}
	_, err = fmt.Fprintf(io.Stdout, "Revoked key %s (%s): every instance refuses it within a second.\n", k.ID, k.Name)
	return err
}

// serverKeys works through a server's admin API.
type serverKeys struct{ c *client.Client }

func (s serverKeys) create(ctx context.Context, p client.CreateKeyParams) (*client.CreatedKey, error) {
	return s.c.CreateKey(ctx, p)
}
func (s serverKeys) list(ctx context.Context) ([]client.Key, error) { return s.c.Keys(ctx) }
func (s serverKeys) revoke(ctx context.Context, id string) (*client.Key, error) {
	return s.c.RevokeKey(ctx, id)
}
func (s serverKeys) close() {}

func (s serverKeys) usable(ctx context.Context, id, _ string) (bool, error) {
	ks, err := s.c.Keys(ctx)
	if err != nil {
		return false, err
	}
	for _, k := range ks {
		if k.ID == id {
			return keyState(k) == "active", nil
		}
	}
	return false, nil
}

// databaseKeys works on the database with the key use cases, as the
// unrestricted principal.
type databaseKeys struct {
	keys *application.KeyService
	db   *sqlx.DB
}

func openDatabaseKeys(ctx context.Context, url string) (*databaseKeys, error) {
	// A one-shot command: no prepared statements (it could go through a
	// transaction pooler, which cannot keep them).
	db, err := postgres.Open(ctx, url, postgres.PoolConfig{MaxOpen: 2, MaxIdle: 2, Conn: postgres.DefaultConnConfig(), StatementCacheSize: -1})
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	return &databaseKeys{keys: application.NewKeyService(postgres.NewTxRunner(db), application.KeyConfig{}, nil), db: db}, nil
}

func (d *databaseKeys) close() { _ = d.db.Close() }

func (d *databaseKeys) create(ctx context.Context, p client.CreateKeyParams) (*client.CreatedKey, error) {
	params := apikey.CreateParams{Name: p.Name, Queues: p.Queues, WorkerPrefix: p.WorkerPrefix, ExpiresIn: p.ExpiresIn}
	for _, s := range p.Scopes {
		params.Scopes = append(params.Scopes, apikey.Scope(s))
	}
	k, token, err := d.keys.Create(ctx, params)
	if err != nil {
		return nil, err
	}
	return &client.CreatedKey{Key: clientKey(k), Token: token}, nil
}

func (d *databaseKeys) list(ctx context.Context) ([]client.Key, error) {
	ks, err := d.keys.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]client.Key, len(ks))
	for i, k := range ks {
		out[i] = clientKey(k)
	}
	return out, nil
}

func (d *databaseKeys) revoke(ctx context.Context, id string) (*client.Key, error) {
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("no API key has id %q", id)
	}
	k, err := d.keys.Revoke(ctx, uid)
	if errors.Is(err, apikey.ErrNotFound) {
		return nil, fmt.Errorf("no API key has id %q", id)
	}
	if err != nil {
		return nil, err
	}
	out := clientKey(k)
	return &out, nil
}

func (d *databaseKeys) usable(ctx context.Context, _, token string) (bool, error) {
	_, err := d.keys.Authenticate(ctx, token)
	if apikey.Unauthenticated(err) {
		return false, nil
	}
	return err == nil, err
}

// clientKey shows a key as the admin API does.
func clientKey(k *apikey.Key) client.Key {
	v := k.Snapshot()
	out := client.Key{ID: v.ID.String(), Name: v.Name, Queues: nonNil(v.Queues), CreatedAt: v.CreatedAt.UTC(),
		LastUsedAt: v.LastUsedAt, ExpiresAt: v.ExpiresAt, RevokedAt: v.RevokedAt}
	for _, s := range v.Scopes {
		out.Scopes = append(out.Scopes, string(s))
	}
	if v.WorkerPrefix != "" {
		out.WorkerPrefix = &v.WorkerPrefix
	}
	return out
}
