package ports

import "errors"

// ErrUnavailable means that storage could not be reached, or lost the
// connection while the operation ran: the operation did not happen, or, when
// the connection broke while it committed, its outcome is unknown. It is
// transient; the caller may repeat the operation later (writes are safe to
// repeat with their idempotency key or lease). Adapters wrap the driver's
// error with it (errors.Is finds it); the HTTP adapter answers 503 with
// Retry-After.
var ErrUnavailable = errors.New("storage unavailable")
