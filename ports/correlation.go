package ports

import "context"

type correlationKey struct{}

// WithCorrelationID returns ctx carrying the id of the request being served.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

// CorrelationID returns the request id ctx carries, or "".
func CorrelationID(ctx context.Context) string {
	id, _ := ctx.Value(correlationKey{}).(string)
	return id
}
