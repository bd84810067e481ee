package http

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// Access is what a route asks of a request: nothing (Public), or an API key
// that holds one of Scopes (admin holds every scope). Every route declares
// one where it is registered (routes.go); a route without one is never
// served (500), and a test walks the router for such routes.
type Access struct {
	// Public routes need no key (liveness and readiness probes).
	Public bool
	// Scopes lists the scopes of which the key must hold one.
	Scopes []apikey.Scope
}

// Declared reports whether the access was declared (the zero Access is
// not).
func (a Access) Declared() bool { return a.Public || len(a.Scopes) > 0 }

// PublicAccess is the access of routes anyone may call.
func PublicAccess() Access { return Access{Public: true} }

// Requires is the access of routes that need a key holding one of scopes.
func Requires(scopes ...apikey.Scope) Access { return Access{Scopes: scopes} }

// AuthMode turns API key authentication on or off.
type AuthMode string

const (
	// AuthAuto (the default) is on, except when the HTTP address is a
	// loopback address (a local development server).
	AuthAuto AuthMode = ""
	// AuthOn: every route but /healthz and /readyz needs a key.
	AuthOn AuthMode = "on"
	// AuthOff: every route is open, as before keys existed.
	AuthOff AuthMode = "off"
)

// AuthEnabled reports whether requests must carry an API key.
func (c ServerConfig) AuthEnabled() bool {
	switch c.Auth {
	case AuthOn:
		return true
	case AuthOff:
		return false
	default:
		return !LoopbackAddr(c.Addr)
	}
}

// LoopbackAddr reports whether the listen address host:port binds only a
// loopback interface (127.0.0.0/8, ::1, localhost). An empty host binds
// every interface; a host name other than localhost is not assumed to be
// loopback.
func LoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authRealm names the protection space in WWW-Authenticate challenges.
const authRealm = "taskmaster"

// bearerToken returns the token of an Authorization: Bearer header, "" when
// the header is absent, or the whole header when it is not a bearer
// credential (which then fails as a malformed token).
func bearerToken(r *http.Request) string {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(h, " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(token)
	}
	return h
}

var (
	// errUndeclaredAccess is the internal error of a route that declared
	// no access: fail closed.
	errUndeclaredAccess = errors.New("the route declares no access requirement")
	// errNoAuthenticator: authentication is on but the server was built
	// without Deps.Keys; fail closed.
	errNoAuthenticator = errors.New("authentication is on but no key service is wired")
)

// keyStillWorks reports whether the key a long-running request (an event
// stream) was authenticated with still works: a revoked or expired key's
// stream ends within the lookup cache's lifetime of a poll, like its other
// requests. Cheap: the lookup is cached (ports.CheckPrincipal).
func (s *Server) keyStillWorks(r *http.Request) bool {
	return ports.CheckPrincipal(r.Context()) == nil
}

// withAuth is router middleware (it runs after matching): it enforces the
// matched route's Access. A request to a non-public route must carry a
// usable key (else 401, with a WWW-Authenticate challenge), within the key's
// rate limit (else 429), holding one of the route's scopes (else 403). A
// token that names no usable key is charged to the client address; once an
// address has none left, a token this instance has not seen work is a 429
// without a lookup (so random tokens neither load the database nor crowd
// real keys out of the lookup cache). The
// key goes into the request context (ports.WithPrincipal) for the use cases'
// own rules, and into the request's log lines. With authentication off,
// every declared route is open and no key is looked at.
func (s *Server) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := s.access[mux.CurrentRoute(r)]
		switch {
		case !a.Declared():
			writeError(w, r, errUndeclaredAccess)
			return
		case a.Public || !s.auth:
			next.ServeHTTP(w, r)
			return
		case s.keys == nil:
			writeError(w, r, errNoAuthenticator)
			return
		}
		token := bearerToken(r)
		if token != "" && !s.keys.Known(token) && s.limits.ClientSpent(w, r) {
			// This address's failed authentications are spent: a token
			// this instance has not seen work costs no lookup.
			writeProblem(w, r, newProblem(kindRateLimited, "too many requests from this address failed to authenticate; retry after Retry-After seconds", nil))
			return
		}
		key, err := s.keys.Authenticate(r.Context(), token)
		if err != nil {
			if apikey.LookedUp(err) {
				s.limits.ChargeClient(r)
			}
			writeError(w, r, err)
			return
		}
		if !s.limits.Key(w, key) {
			writeProblem(w, r, newProblem(kindRateLimited, "the API key's request rate limit is exhausted; retry after Retry-After seconds", nil))
			return
		}
		if err := key.Allows(a.Scopes...); err != nil {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm=%q, error="insufficient_scope", scope=%q`, authRealm, scopeList(a.Scopes)))
			writeError(w, r, err)
			return
		}
		ctx := ports.WithPrincipal(r.Context(), key)
		ctx = ports.WithPrincipalCheck(ctx, func(ctx context.Context) error {
			_, err := s.keys.Authenticate(ctx, token)
			return err
		})
		ctx = context.WithValue(ctx, loggerKey{}, requestLogFrom(ctx).with(zap.Stringer("key_id", key.ID())))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// challenge is the RFC 6750 WWW-Authenticate value for an authentication
// failure: a bare challenge when no credential came, invalid_token else.
func challenge(err error) string {
	if errors.Is(err, apikey.ErrMissing) {
		return fmt.Sprintf(`Bearer realm=%q`, authRealm)
	}
	return fmt.Sprintf(`Bearer realm=%q, error="invalid_token", error_description=%q`, authRealm, err.Error())
}

func scopeList(scopes []apikey.Scope) string {
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	return strings.Join(names, " ")
}

// route registers a handler for one method and path with its access.
func (s *Server) route(r *mux.Router, method, path string, a Access, h http.HandlerFunc) {
	route := r.HandleFunc(path, h).Methods(method)
	s.access[route] = a
	s.jsonRoutes[route] = true
}

// Validate reports whether the mode is known.
func (m AuthMode) Validate() error {
	switch m {
	case AuthAuto, AuthOn, AuthOff:
		return nil
	}
	return fmt.Errorf("must be on or off, not %q", string(m))
}

// unauthenticatedDetail is the detail of a 401 problem: the sentinel that
// says why (no key, not a key, unknown, revoked, expired).
func unauthenticatedDetail(err error) string {
	for _, sentinel := range []error{apikey.ErrMissing, apikey.ErrMalformedToken, apikey.ErrUnknown, apikey.ErrRevoked, apikey.ErrExpired} {
		if errors.Is(err, sentinel) {
			return sentinel.Error()
		}
	}
	return err.Error()
}
