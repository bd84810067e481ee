package ports

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
)

// Push delivery and named limits (issue 27).

// PushQueue is a push queue as the dispatchers read it.
type PushQueue struct {
	Queue  string
	Paused bool
	// Push is its delivery, with the sealed secrets (a previous secret
	// whose overlap is over at the database clock is left out).
	Push queue.Push
}

// DeliveryStats are what one instance's dispatcher last delivered to one
// push queue's endpoint.
type DeliveryStats struct {
	Queue    string
	Instance string
	// InFlight is its deliveries in flight.
	InFlight int
	// Statuses are the response statuses of its last deliveries, newest
	// first (0: no response: a timeout, a connection error).
	Statuses []int
	// LatencyMillis are their latencies, in the same order.
	LatencyMillis []int
	// UpdatedAt is when it wrote them (database clock).
	UpdatedAt time.Time
}

// PushStore holds what the dispatchers read and write besides tasks.
type PushStore interface {
	// Queues returns every push queue, by name.
	Queues(ctx context.Context) ([]PushQueue, error)
	// SaveDeliveryStats writes instance's rows (one per queue in stats)
	// and deletes its rows of queues not in stats.
	SaveDeliveryStats(ctx context.Context, instance string, stats []DeliveryStats) error
	// PruneDeliveryStats deletes the rows of every instance that wrote
	// none for olderThan.
	PruneDeliveryStats(ctx context.Context, olderThan time.Duration) error
}

// DeliverySummary merges what the dispatchers of every instance reported
// recently of one push queue's deliveries.
type DeliverySummary struct {
	// InFlight is the deliveries in flight, summed over the instances.
	InFlight int
	// Statuses counts the recent deliveries by response status (0: no
	// response).
	Statuses map[int]int
	// Count is how many recent deliveries were sampled.
	Count int
	// LatencyP50 and LatencyP99 are their latency percentiles (zero when
	// Count is 0).
	LatencyP50, LatencyP99 time.Duration
	// LastStatus is the newest delivery's status of the instance that
	// reported last (0: no response); meaningless when Count is 0.
	LastStatus int
	// AsOf is when the newest report was written (zero: none).
	AsOf time.Time
}

// LimitInfo is a named limit with what uses it.
type LimitInfo struct {
	Limit queue.Limit
	// Queues are the queues naming it, by name.
	Queues []string
	// Running counts their RUNNING tasks.
	Running int
	// Tokens is the bucket's level now (nil without a rate limit).
	Tokens *float64
	// CreatedAt and UpdatedAt are the database's times of its creation and
	// last change.
	CreatedAt, UpdatedAt time.Time
}

// LimitPutFunc decides a named limit's new values at the database time
// now; before is nil when the limit is new.
type LimitPutFunc func(before *queue.Limit, now time.Time) (queue.Limit, []event.Event, error)

// LimitDeleteFunc confirms the deletion of a named limit at the database
// time now (an error keeps it) and returns its events.
type LimitDeleteFunc func(l queue.Limit, now time.Time) ([]event.Event, error)

// LimitStore persists named limits.
type LimitStore interface {
	// Put creates or replaces the named limit (locking it), as fn decides,
	// and records fn's events; a changed rate limit starts with a full
	// bucket. created is true for a new limit.
	Put(ctx context.Context, name string, fn LimitPutFunc) (info LimitInfo, created bool, err error)
	// Get returns one named limit (queue.ErrLimitNotFound when absent).
	Get(ctx context.Context, name string) (LimitInfo, error)
	// List returns every named limit, by name.
	List(ctx context.Context) ([]LimitInfo, error)
	// Delete locks and deletes the named limit once fn confirms, and
	// records fn's events: queue.ErrLimitNotFound when absent, a
	// *queue.LimitInUseError when queues name it.
	Delete(ctx context.Context, name string, fn LimitDeleteFunc) (queue.Limit, error)
	// Missing locks the named limits names against deletion until the
	// transaction ends (FOR KEY SHARE) and returns those that do not
	// exist, in the order given.
	Missing(ctx context.Context, names []string) ([]string, error)
}

// LimitService is what operators do with named limits.
type LimitService interface {
	// Put creates (created true) or replaces a named limit.
	Put(ctx context.Context, name string, p queue.LimitParams) (info LimitInfo, created bool, err error)
	// Get returns one named limit.
	Get(ctx context.Context, name string) (LimitInfo, error)
	// List returns every named limit, by name.
	List(ctx context.Context) ([]LimitInfo, error)
	// Delete removes a named limit no queue names, and returns it as it
	// was.
	Delete(ctx context.Context, name string) (queue.Limit, error)
}

// Sealer seals secrets for storage and opens them again (push delivery's
// signing secrets and static headers). aad binds a sealed value to where
// it belongs (a queue and a field): a value moved elsewhere does not open.
type Sealer interface {
	Seal(plaintext, aad string) (string, error)
	Open(sealed, aad string) (string, error)
}

// Delivery is one POST of a task to a push queue's endpoint.
type Delivery struct {
	URL     string
	Timeout time.Duration
	// Body is the task's payload ("null" when it has none).
	Body json.RawMessage
	// Header holds every header to send but Content-Type (always
	// application/json): the static ones, the task's, the signature.
	Header map[string]string
}

// DeliveryResponse is what an endpoint answered, or why it did not.
type DeliveryResponse struct {
	// Status is the response's status (0: no response).
	Status int
	// RetryAfter and Location are the response's headers of those names
	// ("" when absent).
	RetryAfter, Location string
	// Body is the response body, at most the sender's cap.
	Body []byte
	// Truncated: the body was longer than Body.
	Truncated bool
	// Err is why no response came (timeout, refused address, connection
	// error); nil with a response.
	Err error
	// TimedOut: Err is the delivery's timeout.
	TimedOut bool
	// Latency is how long the delivery took.
	Latency time.Duration
}

// Sender sends deliveries (adapters/push).
type Sender interface {
	// Send POSTs d and reads the answer, within d.Timeout or until ctx
	// ends. It never follows redirects.
	Send(ctx context.Context, d Delivery) DeliveryResponse
}

// DeliveryReport is a push dispatcher's report of one delivery: a fenced
// completion or failure of the task it holds, with the attempt's HTTP
// status.
type DeliveryReport struct {
	TaskID   uuid.UUID
	WorkerID string
	LeaseID  uuid.UUID
	// Complete: the endpoint answered 2xx; Result is the task's result.
	Complete bool
	Result   json.RawMessage
	// Error, Retryable and RetryAfter describe a failure.
	Error      string
	Retryable  bool
	RetryAfter *time.Duration
	// HTTPStatus is the response's status (0: none).
	HTTPStatus int
}
