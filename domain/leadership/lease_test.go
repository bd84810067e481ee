package leadership_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/leadership"
)

var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

const ttl = 10 * time.Second

// held is job led by "a" in term 3 since base, renewed at base+5s (expires
// at base+15s).
func held() leadership.Snapshot {
	return leadership.Snapshot{Job: "job", Owner: "a", Term: 3, AcquiredAt: base, RenewedAt: at(5 * time.Second), ExpiresAt: at(15 * time.Second)}
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		start     *leadership.Lease
		owner     string
		now       time.Time
		want      leadership.Snapshot
		newTerm   bool
		wantError error
	}{
		{
			name: "a vacant lease is taken in term 1", start: leadership.Vacant("job"), owner: "a", now: base,
			want:    leadership.Snapshot{Job: "job", Owner: "a", Term: 1, AcquiredAt: base, RenewedAt: base, ExpiresAt: at(ttl)},
			newTerm: true,
		},
		{
			name: "the owner renews in its term", start: leadership.Restore(held()), owner: "a", now: at(10 * time.Second),
			want: func() leadership.Snapshot {
				s := held()
				s.RenewedAt, s.ExpiresAt = at(10*time.Second), at(20*time.Second)
				return s
			}(),
		},
		{
			name: "the owner renews its expired lease in the same term (nobody led since)", start: leadership.Restore(held()), owner: "a", now: at(time.Minute),
			want: func() leadership.Snapshot {
				s := held()
				s.RenewedAt, s.ExpiresAt = at(time.Minute), at(time.Minute+ttl)
				return s
			}(),
		},
		{
			name: "another owner waits while the lease runs", start: leadership.Restore(held()), owner: "b", now: at(15*time.Second - time.Microsecond),
			want: held(), wantError: leadership.ErrHeld,
		},
		{
			name: "another owner takes over the expired lease in the next term", start: leadership.Restore(held()), owner: "b", now: at(15 * time.Second),
			want:    leadership.Snapshot{Job: "job", Owner: "b", Term: 4, AcquiredAt: at(15 * time.Second), RenewedAt: at(15 * time.Second), ExpiresAt: at(25 * time.Second)},
			newTerm: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			newTerm, err := c.start.Acquire(c.owner, ttl, c.now)
			if c.wantError != nil {
				require.ErrorIs(t, err, c.wantError)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.newTerm, newTerm)
			require.Equal(t, c.want, c.start.Snapshot())
		})
	}
}

func TestRenewAndReleaseOnlyInTheirTerm(t *testing.T) {
	t.Parallel()
	for name, holder := range map[string]struct {
		owner string
		term  int64
	}{
		"another owner":      {"b", 3},
		"an earlier term":    {"a", 2},
		"no term":            {"a", 0},
		"a term not yet had": {"a", 4},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := leadership.Restore(held())
			require.ErrorIs(t, l.Renew(holder.owner, holder.term, ttl, at(6*time.Second)), leadership.ErrLost)
			require.ErrorIs(t, l.Release(holder.owner, holder.term, at(6*time.Second)), leadership.ErrLost)
			require.Equal(t, held(), l.Snapshot(), "nothing changed")
		})
	}

	l := leadership.Restore(held())
	require.NoError(t, l.Renew("a", 3, ttl, at(time.Minute)), "an expired lease nobody took over is still its term")
	require.Equal(t, at(time.Minute+ttl), l.Snapshot().ExpiresAt)
	require.NoError(t, l.Release("a", 3, at(2*time.Minute)))
	require.True(t, l.Expired(at(2*time.Minute)))
	require.Equal(t, int64(3), l.Term(), "a release keeps the term: the next owner's is 4")
	newTerm, err := l.Acquire("b", ttl, at(2*time.Minute))
	require.NoError(t, err)
	require.True(t, newTerm)
	require.Equal(t, int64(4), l.Term())
	require.ErrorIs(t, l.Renew("a", 3, ttl, at(2*time.Minute)), leadership.ErrLost, "a's term is over")
}

func TestLeaseTTLMustBePositive(t *testing.T) {
	t.Parallel()
	_, err := leadership.Vacant("job").Acquire("a", 0, base)
	require.Error(t, err)
	require.Error(t, leadership.Restore(held()).Renew("a", 3, -time.Second, base))
}
