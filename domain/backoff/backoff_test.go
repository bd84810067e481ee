package backoff_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/backoff"
)

func TestDelay(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: time.Second, Cap: 5 * time.Minute}
	cases := []struct {
		attempts int
		want     time.Duration
	}{
		{-1, time.Second},
		{0, time.Second},
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{8, 256 * time.Second},
		{9, 5 * time.Minute},
		{62, 5 * time.Minute},
		{1000, 5 * time.Minute},
	}
	for _, c := range cases {
		require.Equal(t, c.want, p.Delay(c.attempts), "attempts=%d", c.attempts)
	}
	frac := backoff.Policy{Base: 250 * time.Millisecond, Cap: time.Second}
	require.Equal(t, 500*time.Millisecond, frac.Delay(1))
	require.Equal(t, time.Second, frac.Delay(3))
}

func TestValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, backoff.DefaultPolicy().Validate())
	require.Error(t, backoff.Policy{Base: 0, Cap: time.Second}.Validate())
	require.Error(t, backoff.Policy{Base: 2 * time.Second, Cap: time.Second}.Validate())
}

func TestWait(t *testing.T) {
	t.Parallel()
	none := backoff.Policy{Base: time.Second, Cap: time.Minute}
	require.Equal(t, 4*time.Second, none.Wait(2, func() float64 { return 0.5 }), "no jitter: the delay, whatever the source")
	full := backoff.Policy{Base: time.Second, Cap: time.Minute, Jitter: backoff.JitterFull}
	require.Equal(t, 2*time.Second, full.Wait(2, func() float64 { return 0.5 }))
	require.Equal(t, time.Duration(0), full.Wait(2, func() float64 { return 0 }))
	require.Equal(t, 4*time.Second, full.Wait(2, nil), "no source: the longest wait")
	require.Equal(t, 4*time.Second, full.Wait(2, func() float64 { return 1 }), "a source out of [0,1) does not break the bounds")
	require.Error(t, backoff.Policy{Base: time.Second, Cap: time.Second, Jitter: "half"}.Validate())
}
