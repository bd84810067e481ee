package apikey

import (
	"slices"

	"github.com/taskmaster/taskmaster/domain/event"
)

// SeesQueues reports whether a key limited to some queues may see something
// that concerns these queues (a worker serving them): one of them must be
// allowed. Something for every queue (an empty list) is beyond a limited
// key.
func (k *Key) SeesQueues(queues []string) bool {
	if !k.Restricted() {
		return true
	}
	return slices.ContainsFunc(queues, k.QueueAllowed)
}

// SeesEvent reports whether the key may receive e on an event stream. A key
// limited to some queues sees the events of tasks in its queues, of workers
// serving one of them, and audit events of such tasks and workers; not the
// events of keys, nor of workers that serve every queue.
func (k *Key) SeesEvent(e event.Event) bool {
	switch {
	case !k.Restricted():
		return true
	case e.Queue != "":
		return k.QueueAllowed(e.Queue)
	case len(e.Queues) > 0:
		return k.SeesQueues(e.Queues)
	default:
		return false
	}
}
