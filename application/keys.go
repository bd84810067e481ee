package application

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// Defaults of KeyConfig.
const (
	// DefaultKeyCacheTTL is how long an instance trusts a key lookup: a
	// revoked key is refused on every instance within it.
	DefaultKeyCacheTTL = 500 * time.Millisecond
	// MaxKeyCacheTTL is the longest lookup lifetime accepted: revocation
	// must reach every instance within a second.
	MaxKeyCacheTTL = time.Second
	// DefaultKeyUsageInterval is how often an instance saves the
	// last_used_at of the keys it saw used.
	DefaultKeyUsageInterval = time.Minute
	// DefaultKeyCacheSize bounds the lookups an instance remembers.
	DefaultKeyCacheSize = 10000
	// keyLoadTimeout bounds one lookup, which waiting requests share.
	keyLoadTimeout = 10 * time.Second
)

// KeyConfig configures API key authentication.
type KeyConfig struct {
	// CacheTTL is how long a lookup of a token (found or not) is trusted
	// (0: DefaultKeyCacheTTL; at most MaxKeyCacheTTL).
	CacheTTL time.Duration
	// UsageInterval is how often last_used_at is saved (0:
	// DefaultKeyUsageInterval).
	UsageInterval time.Duration
	// CacheSize bounds the remembered lookups (0: DefaultKeyCacheSize).
	CacheSize int
}

// Validate reports whether the config can be used.
func (c KeyConfig) Validate() error {
	switch {
	case c.CacheTTL < 0 || c.CacheTTL > MaxKeyCacheTTL:
		return fmt.Errorf("key cache lifetime must be between 0 and %s", MaxKeyCacheTTL)
	case c.UsageInterval < 0 || c.CacheSize < 0:
		return errors.New("key usage interval and cache size must not be negative")
	}
	return nil
}

func (c KeyConfig) withDefaults() KeyConfig {
	if c.CacheTTL == 0 {
		c.CacheTTL = DefaultKeyCacheTTL
	}
	if c.UsageInterval == 0 {
		c.UsageInterval = DefaultKeyUsageInterval
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultKeyCacheSize
	}
	return c
}

// KeyService implements ports.KeyService. It is also a background service:
// while it runs it saves, every UsageInterval, the last_used_at of the keys
// that authenticated since, off the requests' path.
type KeyService struct {
	lifecycle.Base
	tx     ports.TxRunner
	cfg    KeyConfig
	logger *zap.Logger

	mu     sync.Mutex
	lookup map[string]*keyLookup // by token digest
	used   map[uuid.UUID]struct{}
}

var (
	_ ports.KeyService  = (*KeyService)(nil)
	_ lifecycle.Service = (*KeyService)(nil)
)

// NewKeyService returns the key use cases over tx.
func NewKeyService(tx ports.TxRunner, cfg KeyConfig, logger *zap.Logger) *KeyService {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &KeyService{tx: tx, cfg: cfg.withDefaults(), logger: logger,
		lookup: map[string]*keyLookup{}, used: map[uuid.UUID]struct{}{}}
}

// auditKeyID names the key acting in ctx in audit events ("" for none).
func auditKeyID(ctx context.Context) string {
	if k := ports.Principal(ctx); k != nil {
		return k.ID().String()
	}
	return ""
}

// Create makes a key. Its token is returned here only: storage keeps the
// token's digest. The creation is audited (audit.key_created).
func (s *KeyService) Create(ctx context.Context, p apikey.CreateParams) (*apikey.Key, string, error) {
	if err := apikey.ValidateCreate(&p); err != nil {
		return nil, "", err
	}
	token, err := apikey.NewToken()
	if err != nil {
		return nil, "", fmt.Errorf("create api key: %w", err)
	}
	id, err := uuid.NewV7()
	if err != nil {
		return nil, "", fmt.Errorf("create api key: %w", err)
	}
	var out *apikey.Key
	err = s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Keys.Create(ctx, func(now time.Time) (*apikey.Key, []event.Event, error) {
			k, err := apikey.Create(p, id, apikey.Hash(token), now)
			e := event.Audit(event.AuditKeyCreated, auditKeyID(ctx), now)
			e.TargetKeyID = id.String()
			return k, []event.Event{e}, err
		})
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("create api key: %w", err)
	}
	return out, token, nil
}

// List returns every key, revoked and expired ones included.
func (s *KeyService) List(ctx context.Context) ([]*apikey.Key, error) {
	var out []*apikey.Key
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Keys.List(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// Revoke stops a key from working: at once on this instance, and within
// CacheTTL on every other. Revoking a revoked key changes nothing; the
// first revocation is audited (audit.key_revoked).
func (s *KeyService) Revoke(ctx context.Context, id uuid.UUID) (*apikey.Key, error) {
	var out *apikey.Key
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Keys.Update(ctx, id, func(k *apikey.Key, now time.Time) ([]event.Event, bool, error) {
			if !k.Revoke(now) {
				return nil, false, nil
			}
			e := event.Audit(event.AuditKeyRevoked, auditKeyID(ctx), now)
			e.TargetKeyID = id.String()
			return []event.Event{e}, true, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoke api key: %w", err)
	}
	s.mu.Lock()
	delete(s.lookup, string(out.Snapshot().Hash))
	s.mu.Unlock()
	return out, nil
}

// AnyUsable reports whether some key is neither revoked nor expired.
func (s *KeyService) AnyUsable(ctx context.Context) (bool, error) {
	var ok bool
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		ok, err = st.Keys.Usable(ctx)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("look for api keys: %w", err)
	}
	return ok, nil
}

// keyLookup is one lookup of a token digest, shared by the requests that
// present the token while it is fresh.
type keyLookup struct {
	// ready is closed once the fields below are set.
	ready chan struct{}
	// started is when the lookup began (this process's monotonic clock).
	started time.Time
	// key is the key found (nil: none has the token).
	key *apikey.Key
	// dbNow is the database time the key was read at.
	dbNow time.Time
	// err is an infrastructure error (the lookup is not kept).
	err error
}

// Authenticate returns the key token names, provided it is neither revoked
// nor expired. Lookups (found or not) are shared and kept for CacheTTL, so a
// busy key costs one query per CacheTTL per instance. Expiry is judged on
// the database clock: the time of the lookup's read plus the time elapsed
// since the lookup began on this process's monotonic clock (never less than
// the database's time; no wall clock is compared with another).
func (s *KeyService) Authenticate(ctx context.Context, token string) (*apikey.Key, error) {
	if token == "" {
		return nil, apikey.ErrMissing
	}
	if err := apikey.CheckToken(token); err != nil {
		return nil, err
	}
	digest := string(apikey.Hash(token))
	l, mine := s.fresh(digest)
	if mine {
		s.load(ctx, digest, l)
	}
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	if l.key == nil {
		return nil, apikey.ErrUnknown
	}
	if err := l.key.Check(l.dbNow.Add(time.Since(l.started))); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.used[l.key.ID()] = struct{}{}
	s.mu.Unlock()
	return l.key, nil
}

// Known implements ports.KeyService: the lookup of token this instance
// remembers (fresh or not) found a usable key.
func (s *KeyService) Known(token string) bool {
	if apikey.CheckToken(token) != nil {
		return false
	}
	s.mu.Lock()
	l := s.lookup[string(apikey.Hash(token))]
	s.mu.Unlock()
	if l == nil {
		return false
	}
	select {
	case <-l.ready:
		return l.key != nil
	default:
		return false
	}
}

// fresh returns a lookup of digest that began less than CacheTTL ago, or
// a new one that the caller must load (mine).
func (s *KeyService) fresh(digest string) (l *keyLookup, mine bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l = s.lookup[digest]
	if l != nil && time.Since(l.started) < s.cfg.CacheTTL {
		return l, false
	}
	l = &keyLookup{ready: make(chan struct{}), started: time.Now()}
	s.evict()
	s.lookup[digest] = l
	return l, true
}

// load reads the key of digest for l, on a context that the caller going
// away does not cancel: other requests wait for the same lookup.
func (s *KeyService) load(ctx context.Context, digest string, l *keyLookup) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), keyLoadTimeout)
	defer cancel()
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		l.key, l.dbNow, err = st.Keys.ByHash(ctx, []byte(digest))
		if errors.Is(err, apikey.ErrUnknown) {
			l.key, err = nil, nil
		}
		return err
	})
	if err != nil {
		l.err = fmt.Errorf("authenticate: %w", err)
		s.mu.Lock()
		if s.lookup[digest] == l {
			delete(s.lookup, digest) // the next request tries again
		}
		s.mu.Unlock()
	}
	close(l.ready)
}

// evict makes room for a lookup, dropping finished lookups in this order
// until there is: those that found no usable key, then those no longer
// fresh, then any. Tokens that name nothing (random ones, sent to load the
// database) thus never crowd out the keys in use, which Known and the
// cache keep serving. s.mu is held.
func (s *KeyService) evict() {
	if len(s.lookup) < s.cfg.CacheSize {
		return
	}
	for _, drop := range []func(*keyLookup) bool{
		func(l *keyLookup) bool { return l.key == nil },
		func(l *keyLookup) bool { return time.Since(l.started) >= s.cfg.CacheTTL },
		func(*keyLookup) bool { return true },
	} {
		for d, l := range s.lookup {
			if len(s.lookup) < s.cfg.CacheSize {
				return
			}
			select {
			case <-l.ready:
				if drop(l) {
					delete(s.lookup, d)
				}
			default:
			}
		}
	}
}

// Start saves last_used_at every UsageInterval until Stop.
func (s *KeyService) Start(ctx context.Context) error {
	return s.StartLoop(ctx, "key usage", func(context.Context) (lifecycle.LoopFunc, error) {
		return func(ctx context.Context) {
			t := time.NewTicker(s.cfg.UsageInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					// Save what the last interval saw, within a bound.
					fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					s.flushUsage(fctx)
					cancel()
					return
				case <-t.C:
					s.flushUsage(ctx)
				}
			}
		}, nil
	})
}

// Stop saves the usage seen since the last save and stops.
func (s *KeyService) Stop(ctx context.Context) error {
	if err := s.StopLoop(ctx); err != nil {
		return fmt.Errorf("key usage: %w", err)
	}
	return nil
}

// flushUsage sets last_used_at on the keys used since the last save. A
// failed save keeps them for the next one.
func (s *KeyService) flushUsage(ctx context.Context) {
	s.mu.Lock()
	used := s.used
	s.used = map[uuid.UUID]struct{}{}
	s.mu.Unlock()
	if len(used) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(used))
	for id := range used {
		ids = append(ids, id)
	}
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		return st.Keys.MarkUsed(ctx, ids)
	})
	if err != nil {
		s.logger.Warn("could not save api key usage; will try again", zap.Error(err), zap.Int("keys", len(ids)))
		s.mu.Lock()
		for _, id := range ids {
			s.used[id] = struct{}{}
		}
		s.mu.Unlock()
	}
}
