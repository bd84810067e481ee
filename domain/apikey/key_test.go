package apikey

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newKey(t *testing.T, p CreateParams) *Key {
	t.Helper()
	token, err := NewToken()
	require.NoError(t, err)
	k, err := Create(p, uuid.New(), Hash(token), t0)
	require.NoError(t, err)
	return k
}

func TestTokenFormatAndChecksum(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 200 {
		token, err := NewToken()
		require.NoError(t, err)
		require.Len(t, token, TokenLength)
		require.True(t, strings.HasPrefix(token, TokenPrefix))
		require.NoError(t, CheckToken(token))
		require.False(t, seen[token], "tokens never repeat")
		seen[token] = true
		require.Len(t, Hash(token), 32)
	}
	// A fixed source gives a fixed token: the encoding is deterministic, and
	// the zero secret still has the full width.
	zero, err := newToken(bytes.NewReader(make([]byte, 32)))
	require.NoError(t, err)
	require.Equal(t, TokenPrefix+strings.Repeat("0", secretLength), zero[:len(zero)-checksumLength])
	require.NoError(t, CheckToken(zero))
	// Golden values: tokens already issued must keep passing CheckToken.
	require.Equal(t, "tmk_00000000000000000000000000000000000000000002eIzD5", zero)
	ones, err := newToken(bytes.NewReader(bytes.Repeat([]byte{0xff}, 32)))
	require.NoError(t, err)
	require.Equal(t, "tmk_yhjskwdA6OZ1AL1YmHWZWm8LLG7HjnuCA2j5rOw8Xp115FYSt", ones)

	token, _ := NewToken()
	for name, bad := range map[string]string{
		"empty":             "",
		"other system":      "ghp_" + token[4:],
		"truncated":         token[:len(token)-1],
		"one more":          token + "0",
		"typo in secret":    token[:10] + flip(token[10]) + token[11:],
		"typo in checksum":  token[:len(token)-1] + flip(token[len(token)-1]),
		"outside alphabet":  token[:10] + "-" + token[11:],
		"bearer with space": token[:20] + " " + token[21:],
	} {
		require.ErrorIs(t, CheckToken(bad), ErrMalformedToken, name)
	}
}

func flip(c byte) string {
	if c == 'a' {
		return "b"
	}
	return "a"
}

func TestValidateCreate(t *testing.T) {
	t.Parallel()
	p := CreateParams{Name: "ci", Scopes: []Scope{ScopeWork, ScopeRead, ScopeWork}, Queues: []string{"a", "b-*", "a"}, WorkerPrefix: "ci-"}
	require.NoError(t, ValidateCreate(&p))
	require.Equal(t, []Scope{ScopeWork, ScopeRead}, p.Scopes, "de-duplicated")
	require.Equal(t, []string{"a", "b-*"}, p.Queues, "de-duplicated")

	soon := t0.Add(time.Hour)
	for _, tc := range []struct {
		p      CreateParams
		fields []string
	}{
		{CreateParams{Scopes: []Scope{ScopeRead}}, []string{"name"}},
		{CreateParams{Name: strings.Repeat("n", 129), Scopes: []Scope{ScopeRead}}, []string{"name"}},
		{CreateParams{Name: "a\nb", Scopes: []Scope{ScopeRead}}, []string{"name"}},
		{CreateParams{Name: "x"}, []string{"scopes"}},
		{CreateParams{Name: "x", Scopes: []Scope{"root"}}, []string{"scopes[0]"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeRead}, Queues: []string{"*"}}, []string{"queues[0]"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeRead}, Queues: []string{"a*b"}}, []string{"queues[0]"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeRead}, Queues: []string{"sp ace"}}, []string{"queues[0]"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeAdmin}, Queues: []string{"a"}}, []string{"queues"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeAdmin}, WorkerPrefix: "p"}, []string{"worker_prefix"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeProduce}, WorkerPrefix: "p"}, []string{"worker_prefix"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeWork}, WorkerPrefix: "bad prefix"}, []string{"worker_prefix"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeWork}, ExpiresAt: &soon, ExpiresIn: time.Hour}, []string{"expires_in_seconds"}},
		{CreateParams{Name: "x", Scopes: []Scope{ScopeWork}, ExpiresIn: -1}, []string{"expires_in_seconds"}},
	} {
		var v *validation.Error
		require.ErrorAs(t, ValidateCreate(&tc.p), &v, "%+v", tc.p)
		var fields []string
		for _, f := range v.Fields {
			fields = append(fields, f.Field)
		}
		require.Equal(t, tc.fields, fields, "%+v", tc.p)
	}
}

func TestCreateExpiryAndRevocation(t *testing.T) {
	t.Parallel()
	hash := Hash("tmk_x")
	_, err := Create(CreateParams{Name: "x", Scopes: []Scope{ScopeRead}}, uuid.New(), []byte("short"), t0)
	require.Error(t, err, "a digest is 32 bytes")
	past := t0.Add(-time.Second)
	_, err = Create(CreateParams{Name: "x", Scopes: []Scope{ScopeRead}, ExpiresAt: &past}, uuid.New(), hash, t0)
	var v *validation.Error
	require.ErrorAs(t, err, &v)
	require.Equal(t, "expires_at", v.Fields[0].Field)

	k, err := Create(CreateParams{Name: "x", Scopes: []Scope{ScopeRead}, ExpiresIn: time.Hour}, uuid.New(), hash, t0)
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Hour), *k.Snapshot().ExpiresAt, "expires_in counts from the database time of creation")
	require.NoError(t, k.Check(t0.Add(time.Hour-time.Microsecond)))
	require.ErrorIs(t, k.Check(t0.Add(time.Hour)), ErrExpired, "expired at its expiry time")

	forever := newKey(t, CreateParams{Name: "y", Scopes: []Scope{ScopeRead}})
	require.NoError(t, forever.Check(t0.Add(100*365*24*time.Hour)))
	require.True(t, forever.Revoke(t0))
	require.False(t, forever.Revoke(t0.Add(time.Minute)), "revoking twice changes nothing")
	require.Equal(t, t0, *forever.Snapshot().RevokedAt)
	require.ErrorIs(t, forever.Check(t0), ErrRevoked)

	for _, err := range []error{ErrMissing, ErrMalformedToken, ErrUnknown, ErrRevoked, ErrExpired} {
		require.True(t, Unauthenticated(err))
	}
	require.False(t, Unauthenticated(ErrNotFound))
	require.False(t, Unauthenticated(errors.New("database down")))
}

func TestScopes(t *testing.T) {
	t.Parallel()
	admin := newKey(t, CreateParams{Name: "a", Scopes: []Scope{ScopeAdmin}})
	producer := newKey(t, CreateParams{Name: "p", Scopes: []Scope{ScopeProduce}})
	var unrestricted *Key
	for _, s := range Scopes() {
		require.True(t, admin.Has(s), "admin holds every scope: %s", s)
		require.True(t, unrestricted.Has(s), "the unrestricted principal holds every scope")
	}
	require.NoError(t, producer.Allows(ScopeRead, ScopeProduce))
	err := producer.Allows(ScopeWork)
	var f *ForbiddenError
	require.ErrorAs(t, err, &f)
	require.Equal(t, []Scope{ScopeWork}, f.Scopes)
	require.Contains(t, f.Error(), "work scope")
	require.ErrorAs(t, producer.Allows(ScopeAdmin, ScopeRead), &f)
	require.Contains(t, f.Error(), "admin or read")
}

func TestQueueLimits(t *testing.T) {
	t.Parallel()
	k := newKey(t, CreateParams{Name: "q", Scopes: []Scope{ScopeProduce, ScopeRead}, Queues: []string{"emails-*", "sms"}})
	require.True(t, k.Restricted())
	require.Equal(t, []string{"emails-*", "sms"}, k.QueuePatterns())
	for queue, ok := range map[string]bool{
		"emails-": true, "emails-eu": true, "sms": true,
		"emails": false, "sms-eu": false, "other": false, "": false,
	} {
		require.Equal(t, ok, k.QueueAllowed(queue), queue)
		if ok {
			require.NoError(t, k.CheckQueue(queue))
			continue
		}
		var f *ForbiddenError
		require.ErrorAs(t, k.CheckQueue(queue), &f, queue)
		require.Equal(t, queue, f.Queue)
	}
	require.NoError(t, k.CheckQueues([]string{"sms", "emails-eu"}))
	require.Error(t, k.CheckQueues([]string{"sms", "other"}))
	var f *ForbiddenError
	require.ErrorAs(t, k.CheckQueues(nil), &f, "every queue is beyond a limited key")
	require.Equal(t, "*", f.Queue)

	for _, open := range []*Key{nil, newKey(t, CreateParams{Name: "o", Scopes: []Scope{ScopeRead}})} {
		require.False(t, open.Restricted())
		require.Nil(t, open.QueuePatterns())
		require.True(t, open.QueueAllowed("anything"))
		require.NoError(t, open.CheckQueues(nil))
	}
}

func TestWorkerOwnership(t *testing.T) {
	t.Parallel()
	a := newKey(t, CreateParams{Name: "a", Scopes: []Scope{ScopeWork}, WorkerPrefix: "a-"})
	b := newKey(t, CreateParams{Name: "b", Scopes: []Scope{ScopeWork}})
	admin := newKey(t, CreateParams{Name: "root", Scopes: []Scope{ScopeAdmin}})
	var unrestricted *Key

	require.Equal(t, "a-", a.WorkerPrefix())
	require.Empty(t, unrestricted.WorkerPrefix())
	require.Empty(t, unrestricted.OwnerID())
	require.Equal(t, a.ID().String(), a.OwnerID())

	var f *ForbiddenError
	// The prefix: a's workers must be called a-...
	require.NoError(t, a.CheckWorkerID("a-1"))
	require.ErrorAs(t, a.CheckWorkerID("b-1"), &f)
	require.Equal(t, "b-1", f.WorkerID)
	require.NoError(t, b.CheckWorkerID("anything"))

	// Registration: a new worker, or one of no key, is anyone's to take;
	// one of another key is not, except for admin.
	require.NoError(t, a.CheckRegister("a-1", ""))
	require.NoError(t, a.CheckRegister("a-1", a.OwnerID()))
	require.ErrorAs(t, b.CheckRegister("a-1", a.OwnerID()), &f)
	require.Contains(t, f.Error(), "belongs to another API key")
	require.ErrorAs(t, a.CheckRegister("x-1", ""), &f, "the prefix holds for new workers too")
	require.NoError(t, admin.CheckRegister("a-1", a.OwnerID()))

	// Acting as a worker: its owner, or admin, or the unrestricted principal.
	require.NoError(t, a.CheckActAs("a-1", a.OwnerID()))
	require.ErrorAs(t, b.CheckActAs("a-1", a.OwnerID()), &f)
	require.ErrorAs(t, b.CheckActAs("w", ""), &f, "a worker of no key must be registered again first")
	require.Contains(t, f.Error(), "register it with this key")
	require.NoError(t, admin.CheckActAs("a-1", a.OwnerID()))
	require.NoError(t, unrestricted.CheckActAs("a-1", a.OwnerID()))

	// Lease ids: the owner and admin see them.
	require.True(t, a.SeesLeaseOf(a.OwnerID()))
	require.False(t, b.SeesLeaseOf(a.OwnerID()))
	require.False(t, b.SeesLeaseOf(""))
	require.True(t, admin.SeesLeaseOf(a.OwnerID()))
	require.True(t, unrestricted.SeesLeaseOf(""))
}

func TestEventVisibility(t *testing.T) {
	t.Parallel()
	limited := newKey(t, CreateParams{Name: "l", Scopes: []Scope{ScopeRead}, Queues: []string{"emails-*"}})
	open := newKey(t, CreateParams{Name: "o", Scopes: []Scope{ScopeRead}})
	for _, tc := range []struct {
		e    event.Event
		sees bool
	}{
		{event.Event{Type: event.TaskSubmitted, Queue: "emails-eu"}, true},
		{event.Event{Type: event.TaskSubmitted, Queue: "sms"}, false},
		{event.Event{Type: event.WorkerRegistered, Queues: []string{"sms", "emails-x"}}, true},
		{event.Event{Type: event.WorkerRegistered, Queues: []string{"sms"}}, false},
		{event.Event{Type: event.WorkerRegistered}, false}, // serves every queue
		{event.Event{Type: event.AuditTaskRetried, Queue: "emails-eu"}, true},
		{event.Event{Type: event.AuditKeyCreated, TargetKeyID: "k"}, false},
	} {
		require.Equal(t, tc.sees, limited.SeesEvent(tc.e), "%+v", tc.e)
		require.True(t, open.SeesEvent(tc.e), "%+v", tc.e)
	}
}

func TestSnapshotIsACopy(t *testing.T) {
	t.Parallel()
	k := newKey(t, CreateParams{Name: "c", Scopes: []Scope{ScopeRead}, Queues: []string{"a"}})
	v := k.Snapshot()
	v.Scopes[0], v.Queues[0], v.Hash[0] = ScopeAdmin, "b", v.Hash[0]+1
	require.False(t, k.Has(ScopeAdmin))
	require.True(t, k.QueueAllowed("a"))
	require.NotEqual(t, v.Hash, k.Snapshot().Hash)
	restored := Restore(k.Snapshot())
	require.Equal(t, k.Snapshot(), restored.Snapshot())
}
