package ports

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/event"
)

// KeyCreateFunc builds a new key at the database time now, with the events
// of its creation.
type KeyCreateFunc func(now time.Time) (*apikey.Key, []event.Event, error)

// KeyUpdateFunc decides a change to a loaded key at the database time now
// and returns its events; changed false saves nothing.
type KeyUpdateFunc func(k *apikey.Key, now time.Time) (events []event.Event, changed bool, err error)

// KeyStore persists API keys (their token digests, never the tokens).
type KeyStore interface {
	// Create inserts the key fn builds and records fn's events.
	Create(ctx context.Context, fn KeyCreateFunc) (*apikey.Key, error)
	// ByHash loads the key whose token has this digest, with the database
	// time of the read (apikey.ErrUnknown when none has it).
	ByHash(ctx context.Context, hash []byte) (k *apikey.Key, now time.Time, err error)
	// Update locks the key, lets fn decide at the database time, saves it
	// when changed and records fn's events (apikey.ErrNotFound when absent).
	Update(ctx context.Context, id uuid.UUID, fn KeyUpdateFunc) (*apikey.Key, error)
	// List returns every key, revoked and expired ones included, oldest
	// first.
	List(ctx context.Context) ([]*apikey.Key, error)
	// MarkUsed sets last_used_at to the database time on these keys.
	MarkUsed(ctx context.Context, ids []uuid.UUID) error
	// Usable reports whether any key is neither revoked nor expired.
	Usable(ctx context.Context) (bool, error)
}

// KeyService is what operators do with API keys, and how the HTTP adapter
// authenticates a request.
type KeyService interface {
	// Create makes a key and returns it with its token, which exists only
	// in this answer: storage keeps its digest.
	Create(ctx context.Context, p apikey.CreateParams) (k *apikey.Key, token string, err error)
	// List returns every key.
	List(ctx context.Context) ([]*apikey.Key, error)
	// Revoke stops a key from working (at once on this instance, within the
	// authentication cache's lifetime on every other one).
	Revoke(ctx context.Context, id uuid.UUID) (*apikey.Key, error)
	// Authenticate returns the usable key token names, or an error for
	// which apikey.Unauthenticated is true.
	Authenticate(ctx context.Context, token string) (*apikey.Key, error)
	// Known reports, without a lookup, whether token named a usable key
	// the last time this instance looked it up (however long ago, while
	// it remembers): a client that fails too often may still use it.
	Known(token string) bool
	// AnyUsable reports whether some key can authenticate at all.
	AnyUsable(ctx context.Context) (bool, error)
}
