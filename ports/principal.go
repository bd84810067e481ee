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
