package application

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// Defaults of SessionConfig.
const (
	// DefaultSessionTTL is how long a dashboard login lasts.
	DefaultSessionTTL = 12 * time.Hour
	// sessionCleanupBatch is how many expired sessions a login deletes.
	sessionCleanupBatch = 100
	// maxSessionCache bounds the session lookups an instance remembers.
	maxSessionCache = 10000
)

// SessionConfig configures dashboard sessions.
type SessionConfig struct {
	// TTL is a session's lifetime (0: DefaultSessionTTL).
	TTL time.Duration
	// CacheTTL is how long an instance trusts a session lookup (0:
	// DefaultKeyCacheTTL; at most MaxKeyCacheTTL), so a logout or a
	// revoked key reaches every instance within a second, as for keys.
	CacheTTL time.Duration
}

// Validate reports whether the config can be used.
func (c SessionConfig) Validate() error {
	if c.TTL < 0 || c.CacheTTL < 0 || c.CacheTTL > MaxKeyCacheTTL {
		return fmt.Errorf("session lifetime must not be negative, and its cache lifetime at most %s", MaxKeyCacheTTL)
	}
	return nil
}

// SessionService implements ports.SessionService over the sessions table,
// authenticating logins with the key service.
type SessionService struct {
	tx   ports.TxRunner
	keys ports.KeyService
	cfg  SessionConfig

	mu     sync.Mutex
	lookup map[string]sessionLookup // by token digest
}

var _ ports.SessionService = (*SessionService)(nil)

// sessionLookup is one read of a session with its key.
type sessionLookup struct {
	session *apikey.Session
	key     *apikey.Key
	dbNow   time.Time
	started time.Time
}

// NewSessionService returns the session use cases.
func NewSessionService(tx ports.TxRunner, keys ports.KeyService, cfg SessionConfig) *SessionService {
	if cfg.TTL == 0 {
		cfg.TTL = DefaultSessionTTL
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultKeyCacheTTL
	}
	return &SessionService{tx: tx, keys: keys, cfg: cfg, lookup: map[string]sessionLookup{}}
}

// ErrDashboardScope: the key may not use the dashboard, which needs the
// read scope (admin holds it).
var ErrDashboardScope = errors.New("the dashboard needs a key with the read or admin scope")

// Login implements ports.SessionService. The key must work and hold read
// (or admin); a login also deletes a few expired sessions.
func (s *SessionService) Login(ctx context.Context, apiKey string) (string, *apikey.Session, *apikey.Key, error) {
	k, err := s.keys.Authenticate(ctx, apiKey)
	if err != nil {
		return "", nil, nil, err
	}
	if err := k.Allows(apikey.ScopeRead); err != nil {
		return "", nil, nil, err
	}
	token, csrf, err := apikey.NewSessionSecrets()
	if err != nil {
		return "", nil, nil, fmt.Errorf("login: %w", err)
	}
	var out *apikey.Session
	err = s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if _, err := st.Sessions.DeleteExpired(ctx, sessionCleanupBatch); err != nil {
			return err
		}
		var err error
		out, err = st.Sessions.Create(ctx, ports.SessionCreateParams{
			Hash: apikey.SessionHash(token), KeyID: k.ID(), CSRF: csrf, TTL: s.cfg.TTL})
		return err
	})
	if err != nil {
		return "", nil, nil, fmt.Errorf("login: %w", err)
	}
	return token, out, k, nil
}

// Authenticate implements ports.SessionService. Lookups are kept for
// CacheTTL; expiry (the session's and the key's) is judged on the database
// clock: the read's time plus the time elapsed since on this process's
// monotonic clock.
func (s *SessionService) Authenticate(ctx context.Context, token string) (*apikey.Session, *apikey.Key, error) {
	if token == "" {
		return nil, nil, apikey.ErrNoSession
	}
	if !apikey.WellFormedSession(token) {
		return nil, nil, apikey.ErrSessionUnknown
	}
	digest := string(apikey.SessionHash(token))
	s.mu.Lock()
	l, ok := s.lookup[digest]
	s.mu.Unlock()
	if !ok || time.Since(l.started) >= s.cfg.CacheTTL {
		l = sessionLookup{started: time.Now()}
		err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			var err error
			l.session, l.key, l.dbNow, err = st.Sessions.ByHash(ctx, []byte(digest))
			return err
		})
		if err != nil && !errors.Is(err, apikey.ErrSessionUnknown) {
			return nil, nil, fmt.Errorf("session: %w", err)
		}
		s.remember(digest, l)
	}
	if l.session == nil {
		return nil, nil, apikey.ErrSessionUnknown
	}
	now := l.dbNow.Add(time.Since(l.started))
	if err := l.session.Check(now); err != nil {
		return nil, nil, err
	}
	if err := l.key.Check(now); err != nil {
		return nil, nil, err
	}
	return l.session, l.key, nil
}

// Known implements ports.SessionService: the lookup of token this instance
// remembers (fresh or not) found a session.
func (s *SessionService) Known(token string) bool {
	if !apikey.WellFormedSession(token) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.lookup[string(apikey.SessionHash(token))]
	return ok && l.session != nil
}

// remember keeps a lookup, making room by dropping, until there is, the
// lookups that found no session, then stale ones, then any: unknown tokens
// never crowd out sessions in use.
func (s *SessionService) remember(digest string, l sessionLookup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, drop := range []func(sessionLookup) bool{
		func(old sessionLookup) bool { return old.session == nil },
		func(old sessionLookup) bool { return time.Since(old.started) >= s.cfg.CacheTTL },
		func(sessionLookup) bool { return true },
	} {
		for d, old := range s.lookup {
			if len(s.lookup) < maxSessionCache {
				break
			}
			if drop(old) {
				delete(s.lookup, d)
			}
		}
	}
	s.lookup[digest] = l
}

// Logout implements ports.SessionService.
func (s *SessionService) Logout(ctx context.Context, token string) error {
	digest := apikey.SessionHash(token)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		return st.Sessions.Delete(ctx, digest)
	})
	if err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	s.mu.Lock()
	delete(s.lookup, string(digest))
	s.mu.Unlock()
	return nil
}
