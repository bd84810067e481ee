package queue

import "errors"

// ErrNotFound: no queue has this name (it holds no task and has no
// settings).
var ErrNotFound = errors.New("queue not found")
