package postgres

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// micros must round up: a threshold of 300.0005 ms selects silences of
// 300001 µs and more, as the domain's "silence >= threshold" does on the
// whole microseconds the database stores.
func TestMicrosRoundsUp(t *testing.T) {
	t.Parallel()
	cases := map[time.Duration]int64{
		0:                                  0,
		time.Nanosecond:                    1,
		time.Microsecond:                   1,
		time.Microsecond + time.Nanosecond: 2,
		300 * time.Millisecond:             300000,
		300*time.Millisecond + 500:         300001,
		7 * 24 * time.Hour:                 7 * 24 * 3600 * 1000000,
	}
	for d, want := range cases {
		require.Equal(t, want, micros(d), d.String())
	}
}
