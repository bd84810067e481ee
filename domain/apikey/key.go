// Package apikey is who may do what: API keys, their scopes and
// restrictions, and the authorization rules every use case applies. It is
// pure: the HTTP adapter authenticates a request to a *Key, the use cases
// ask the key (CheckQueue, CheckActAs, SeesLeaseOf, ...), and time comes in
// as an argument.
//
// A nil *Key is the unrestricted principal: authentication is off, or the
// caller is the service itself (background jobs) or an operator on the
// database (`taskmaster keys` with TASKMASTER_DATABASE_URL). Every method
// accepts a nil receiver. With authentication on, the HTTP adapter puts a
// key in the context of every request but /healthz and /readyz.
package apikey

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Scope is a set of operations a key may perform.
type Scope string

const (
	// ScopeAdmin: everything, including keys and operator actions (retry,
	// cancel, drain), as any worker, in every queue.
	ScopeAdmin Scope = "admin"
	// ScopeProduce: submit tasks (one or a batch) and read the tasks the
	// key may see.
	ScopeProduce Scope = "produce"
	// ScopeWork: the worker protocol (register, heartbeat, claim, complete,
	// fail, extend) as the workers the key may be.
	ScopeWork Scope = "work"
	// ScopeRead: every GET of the task, worker, queue and event API, the
	// event stream, metrics and the API description.
	ScopeRead Scope = "read"
)

// Scopes lists every scope.
func Scopes() []Scope { return []Scope{ScopeAdmin, ScopeProduce, ScopeWork, ScopeRead} }

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return slices.Contains(Scopes(), s) }

var (
	// ErrNotFound: no key has the given id.
	ErrNotFound = errors.New("api key not found")
	// ErrUnknown: no key has the presented token.
	ErrUnknown = errors.New("no API key matches the bearer token")
	// ErrRevoked: the presented key was revoked.
	ErrRevoked = errors.New("the API key was revoked")
	// ErrExpired: the presented key expired.
	ErrExpired = errors.New("the API key expired")
	// ErrMissing: the request carries no bearer token.
	ErrMissing = errors.New("the request carries no API key: send Authorization: Bearer <key>")
)

// Unauthenticated reports whether err says the caller could not be
// authenticated (no, malformed, unknown, revoked or expired key).
func Unauthenticated(err error) bool {
	for _, target := range []error{ErrMissing, ErrMalformedToken, ErrUnknown, ErrRevoked, ErrExpired} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// LookedUp reports whether err says a well-formed token named no usable key
// (unknown, revoked or expired): an authentication that cost a lookup.
func LookedUp(err error) bool {
	return errors.Is(err, ErrUnknown) || errors.Is(err, ErrRevoked) || errors.Is(err, ErrExpired)
}

// ForbiddenError says an authenticated key may not do what it asked: it
// lacks a scope, a queue, or a worker. Exactly one of Scopes, Queue and
// WorkerID is set.
type ForbiddenError struct {
	// Scopes: the request needs one of these scopes.
	Scopes []Scope
	// Queue: the key may not use this queue.
	Queue string
	// WorkerID: the key may not act as this worker.
	WorkerID string
	// Reason says why, for a human.
	Reason string
}

// Error implements error.
func (e *ForbiddenError) Error() string { return e.Reason }

// Limits on key values.
const (
	// MaxNameLength is the longest key name, in characters.
	MaxNameLength = 128
	// MaxQueues is the most queue patterns a key may list.
	MaxQueues = 64
	// maxPatternLength is the longest queue name or worker prefix.
	maxPatternLength = 128
)

// namePattern is the alphabet of queue names and worker ids; a queue
// pattern is such a name, optionally ending in "*" (a prefix).
var namePattern = regexp.MustCompile(`^[A-Za-z0-9._:-]+$`)

// Snapshot is a key's state as plain data.
type Snapshot struct {
	ID   uuid.UUID
	Name string
	// Hash is the token's digest (Hash); the token itself is never kept.
	Hash   []byte
	Scopes []Scope
	// Queues, when not empty, restricts the key to these queues: exact
	// names, or prefixes ending in "*" ("emails-*").
	Queues []string
	// WorkerPrefix, when set, restricts a work key to worker ids that start
	// with it.
	WorkerPrefix string
	CreatedAt    time.Time
	LastUsedAt   *time.Time
	ExpiresAt    *time.Time
	RevokedAt    *time.Time
}

// Key is an API key.
type Key struct {
	s Snapshot
}

// Restore rebuilds a key from stored state.
func Restore(s Snapshot) *Key {
	s.Scopes = slices.Clone(s.Scopes)
	s.Queues = slices.Clone(s.Queues)
	s.Hash = slices.Clone(s.Hash)
	return &Key{s: s}
}

// Snapshot returns a copy of the key's state.
func (k *Key) Snapshot() Snapshot {
	s := k.s
	s.Scopes = slices.Clone(k.s.Scopes)
	s.Queues = slices.Clone(k.s.Queues)
	s.Hash = slices.Clone(k.s.Hash)
	return s
}

// ID returns the key's id (uuid.Nil for the unrestricted principal).
func (k *Key) ID() uuid.UUID {
	if k == nil {
		return uuid.Nil
	}
	return k.s.ID
}

// OwnerID is the id under which the key owns the workers it registers: its
// id as text, "" for the unrestricted principal (workers registered with
// authentication off belong to no key).
func (k *Key) OwnerID() string {
	if k == nil {
		return ""
	}
	return k.s.ID.String()
}

// CreateParams describe a new key.
type CreateParams struct {
	Name         string
	Scopes       []Scope
	Queues       []string
	WorkerPrefix string
	// ExpiresAt, when set, is when the key stops working.
	ExpiresAt *time.Time
	// ExpiresIn, when positive, makes the key expire that long after its
	// creation (database time). At most one of ExpiresAt and ExpiresIn.
	ExpiresIn time.Duration
}

// ValidateCreate checks a new key's parameters and de-duplicates its lists.
func ValidateCreate(p *CreateParams) error {
	var v validation.Errors
	if n := utf8.RuneCountInString(p.Name); n == 0 || n > MaxNameLength || !utf8.ValidString(p.Name) ||
		strings.ContainsFunc(p.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		v.Add("name", fmt.Sprintf("must be 1 to %d printable characters", MaxNameLength))
	}
	if len(p.Scopes) == 0 {
		v.Add("scopes", "must name at least one of admin, produce, work, read")
	}
	var scopes []Scope
	for i, s := range p.Scopes {
		if !s.Valid() {
			v.Add(fmt.Sprintf("scopes[%d]", i), "must be one of admin, produce, work, read")
			continue
		}
		if !slices.Contains(scopes, s) {
			scopes = append(scopes, s)
		}
	}
	p.Scopes = scopes
	admin := slices.Contains(scopes, ScopeAdmin)
	if len(p.Queues) > MaxQueues {
		v.Add("queues", fmt.Sprintf("must have at most %d entries", MaxQueues))
	}
	var queues []string
	for i, q := range p.Queues {
		name, _ := strings.CutSuffix(q, "*")
		if name == "" || len(q) > maxPatternLength || !namePattern.MatchString(name) {
			v.Add(fmt.Sprintf("queues[%d]", i), fmt.Sprintf("must be a queue name of up to %d characters of [A-Za-z0-9._:-], optionally ending in * (a prefix)", maxPatternLength))
			continue
		}
		if !slices.Contains(queues, q) {
			queues = append(queues, q)
		}
	}
	p.Queues = queues
	if p.WorkerPrefix != "" && (len(p.WorkerPrefix) >= maxPatternLength || !namePattern.MatchString(p.WorkerPrefix)) {
		v.Add("worker_prefix", fmt.Sprintf("must be up to %d characters of [A-Za-z0-9._:-]", maxPatternLength-1))
	}
	if admin && len(p.Queues) > 0 {
		v.Add("queues", "does not apply to admin keys, which may do everything")
	}
	if admin && p.WorkerPrefix != "" {
		v.Add("worker_prefix", "does not apply to admin keys, which may act as any worker")
	}
	if !admin && p.WorkerPrefix != "" && !slices.Contains(scopes, ScopeWork) {
		v.Add("worker_prefix", "applies only to keys with the work scope")
	}
	if p.ExpiresAt != nil && p.ExpiresIn != 0 {
		v.Add("expires_in_seconds", "cannot be given together with expires_at")
	}
	if p.ExpiresIn < 0 {
		v.Add("expires_in_seconds", "must be a whole number of seconds between 1 and 3153600000 (100 years)")
	}
	return v.Err()
}

// Create makes a key with the given id and token digest at the database
// time now.
func Create(p CreateParams, id uuid.UUID, hash []byte, now time.Time) (*Key, error) {
	if err := ValidateCreate(&p); err != nil {
		return nil, err
	}
	if len(hash) != 32 {
		return nil, errors.New("api key: the token digest must be a SHA-256 digest")
	}
	expires := p.ExpiresAt
	if p.ExpiresIn > 0 {
		at := now.Add(p.ExpiresIn)
		expires = &at
	}
	if expires != nil && !expires.After(now) {
		var v validation.Errors
		v.Add("expires_at", "must be in the future")
		return nil, v.Err()
	}
	return &Key{s: Snapshot{
		ID: id, Name: p.Name, Hash: slices.Clone(hash), Scopes: p.Scopes, Queues: p.Queues,
		WorkerPrefix: p.WorkerPrefix, CreatedAt: now, ExpiresAt: expires,
	}}, nil
}

// Revoke stops the key from working at now. Revoking a revoked key changes
// nothing and reports false.
func (k *Key) Revoke(now time.Time) bool {
	if k.s.RevokedAt != nil {
		return false
	}
	k.s.RevokedAt = &now
	return true
}

// Check reports why the key may not be used at now: ErrRevoked, ErrExpired,
// or nil.
func (k *Key) Check(now time.Time) error {
	switch {
	case k == nil:
		return nil
	case k.s.RevokedAt != nil:
		return ErrRevoked
	case k.s.ExpiresAt != nil && !now.Before(*k.s.ExpiresAt):
		return ErrExpired
	default:
		return nil
	}
}

// Has reports whether the key holds scope (admin holds every scope).
func (k *Key) Has(scope Scope) bool {
	return k == nil || slices.Contains(k.s.Scopes, ScopeAdmin) || slices.Contains(k.s.Scopes, scope)
}

// Allows returns nil when the key holds one of scopes, else a
// *ForbiddenError naming them.
func (k *Key) Allows(scopes ...Scope) error {
	if slices.ContainsFunc(scopes, k.Has) {
		return nil
	}
	names := make([]string, len(scopes))
	for i, s := range scopes {
		names[i] = string(s)
	}
	return &ForbiddenError{Scopes: slices.Clone(scopes),
		Reason: "the API key lacks the " + strings.Join(names, " or ") + " scope"}
}

// Restricted reports whether the key is limited to some queues.
func (k *Key) Restricted() bool { return k != nil && len(k.s.Queues) > 0 }

// QueuePatterns returns the queues the key is limited to (exact names and
// prefixes ending in "*"), or nil when it is not limited.
func (k *Key) QueuePatterns() []string {
	if !k.Restricted() {
		return nil
	}
	return slices.Clone(k.s.Queues)
}

// QueueAllowed reports whether the key may use queue.
func (k *Key) QueueAllowed(queue string) bool {
	if !k.Restricted() {
		return true
	}
	return slices.ContainsFunc(k.s.Queues, func(p string) bool { return MatchQueue(p, queue) })
}

// MatchQueue reports whether queue matches pattern: an exact name, or a
// prefix ending in "*".
func MatchQueue(pattern, queue string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(queue, prefix)
	}
	return pattern == queue
}

// CheckQueue returns a *ForbiddenError naming queue unless the key may use
// it. Use it where the caller named the queue (a submission, a claim, a
// filter); where the caller named a task, an invisible queue is a "not
// found" instead (see QueueAllowed).
func (k *Key) CheckQueue(queue string) error {
	if k.QueueAllowed(queue) {
		return nil
	}
	return &ForbiddenError{Queue: queue, Reason: fmt.Sprintf("the API key may not use queue %q", queue)}
}

// CheckQueues is CheckQueue for a worker's queue list; a key limited to
// some queues must name them (an empty list means every queue).
func (k *Key) CheckQueues(queues []string) error {
	if k.Restricted() && len(queues) == 0 {
		return &ForbiddenError{Queue: "*", Reason: "the API key is limited to queues " +
			strings.Join(k.s.Queues, ", ") + ": name the queues (an empty list means every queue)"}
	}
	for _, q := range queues {
		if err := k.CheckQueue(q); err != nil {
			return err
		}
	}
	return nil
}

// CheckWorkerID returns a *ForbiddenError unless the key may act as a
// worker with this id at all: its worker prefix, if any, starts the id.
func (k *Key) CheckWorkerID(workerID string) error {
	if k == nil || k.s.WorkerPrefix == "" || strings.HasPrefix(workerID, k.s.WorkerPrefix) {
		return nil
	}
	return &ForbiddenError{WorkerID: workerID, Reason: fmt.Sprintf(
		"the API key may act only as workers whose id starts with %q", k.s.WorkerPrefix)}
}

// CheckRegister returns a *ForbiddenError unless the key may register (or
// re-register) the worker with this id, which owner owns ("" for a new
// worker, or one registered while authentication was off: registering it
// makes it the key's). A worker belongs to the key that registered it;
// admin may register any.
func (k *Key) CheckRegister(workerID, owner string) error {
	if err := k.CheckWorkerID(workerID); err != nil {
		return err
	}
	if owner == "" {
		return nil
	}
	return k.checkOwner(workerID, owner)
}

// CheckActAs returns a *ForbiddenError unless the key may act as the worker
// with this id and owner (heartbeat, claim, report): the key registered it,
// or is admin. A worker that belongs to no key must be registered again
// first.
func (k *Key) CheckActAs(workerID, owner string) error {
	if err := k.CheckWorkerID(workerID); err != nil {
		return err
	}
	return k.checkOwner(workerID, owner)
}

func (k *Key) checkOwner(workerID, owner string) error {
	if k.SeesLeaseOf(owner) {
		return nil
	}
	reason := fmt.Sprintf("worker %q belongs to another API key", workerID)
	if owner == "" {
		reason = fmt.Sprintf("worker %q belongs to no API key: register it with this key first", workerID)
	}
	return &ForbiddenError{WorkerID: workerID, Reason: reason}
}

// SeesLeaseOf reports whether the key may see the lease ids (the fencing
// tokens) of tasks held by a worker that owner owns: admin may, and the
// key that owns the worker.
func (k *Key) SeesLeaseOf(owner string) bool {
	return k == nil || slices.Contains(k.s.Scopes, ScopeAdmin) || (owner != "" && owner == k.s.ID.String())
}

// WorkerPrefix returns the prefix the key's worker ids must start with
// ("" when any id will do).
func (k *Key) WorkerPrefix() string {
	if k == nil {
		return ""
	}
	return k.s.WorkerPrefix
}
