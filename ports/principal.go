package ports

import (
	"context"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying the API key a request was
// authenticated with. The HTTP adapter puts one in the context of every
// request it authenticates; use cases read it with Principal to apply the
// rules of domain/apikey (worker ownership, queue limits, lease visibility)
// and to name the key in audit events.
func WithPrincipal(ctx context.Context, k *apikey.Key) context.Context {
	return context.WithValue(ctx, principalKey{}, k)
}

// Principal returns the API key ctx carries, or nil: the unrestricted
// principal (authentication off, a background job, an operator on the
// database). A nil *apikey.Key answers every rule with "allowed".
func Principal(ctx context.Context) *apikey.Key {
	k, _ := ctx.Value(principalKey{}).(*apikey.Key)
	return k
}

type principalCheckKey struct{}

// PrincipalCheckFunc reports whether the key a request was authenticated
// with still works: nil, or the reason it no longer does (revoked,
// expired: an apikey authentication error).
type PrincipalCheckFunc func(ctx context.Context) error

// WithPrincipalCheck returns ctx carrying check, which a request that runs
// long (a claim waiting for tasks, an event stream) calls before each step
// it takes for its principal: a key revoked or expired meanwhile takes no
// further step. The HTTP adapter puts one (a cached key lookup) next to
// the principal.
func WithPrincipalCheck(ctx context.Context, check PrincipalCheckFunc) context.Context {
	return context.WithValue(ctx, principalCheckKey{}, check)
}

// CheckPrincipal runs ctx's principal check: nil when ctx carries none (no
// key: authentication off, a background job).
func CheckPrincipal(ctx context.Context) error {
	if check, ok := ctx.Value(principalCheckKey{}).(PrincipalCheckFunc); ok && check != nil {
		return check(ctx)
	}
	return nil
}
