package cron_test

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine has installed

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/cron"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// ticks returns the n ticks of expr in loc after from, in RFC 3339 with
// the zone's offset.
func ticks(t *testing.T, expr string, loc *time.Location, from time.Time, n int) []string {
	t.Helper()
	spec, err := cron.Parse(expr, loc)
	require.NoError(t, err)
	var out []string
	for x := from; len(out) < n; {
		x = spec.Next(x)
		require.False(t, x.IsZero())
		out = append(out, x.In(loc).Format(time.RFC3339))
	}
	return out
}

func TestParseFieldsAndDescriptors(t *testing.T) {
	t.Parallel()
	utc := time.UTC
	from := time.Date(2025, 3, 1, 12, 7, 0, 0, utc)
	require.Equal(t, []string{"2025-03-01T12:15:00Z", "2025-03-01T12:30:00Z"}, ticks(t, "*/15 * * * *", utc, from, 2))
	require.Equal(t, []string{"2025-03-03T09:00:00Z", "2025-03-04T09:00:00Z"}, ticks(t, "0 9 * * MON-FRI", utc, from, 2))
	require.Equal(t, []string{"2025-03-02T00:00:00Z"}, ticks(t, "@daily", utc, from, 1))
	paris := zone(t, "Europe/Paris")
	require.Equal(t, []string{"2025-03-02T09:00:00+01:00"}, ticks(t, "0 9 * * *", paris, from, 1), "read in the schedule's zone")

	spec, err := cron.Parse("@every 90s", paris)
	require.NoError(t, err)
	require.Equal(t, 90*time.Second, spec.Period())
	require.Equal(t, time.Duration(0), mustParse(t, "0 9 * * *").Period())
}

func mustParse(t *testing.T, expr string) interface{ Period() time.Duration } {
	t.Helper()
	spec, err := cron.Parse(expr, time.UTC)
	require.NoError(t, err)
	return spec
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{
		"", "* * * *", "* * * * * *", "61 * * * *", "TZ=UTC * * * * *", "CRON_TZ=Europe/Paris 0 9 * * *",
		"@every 500ms", "@every 1.5s", "@every 0s", "@every -5s", "@every soon", "@fortnightly",
	} {
		_, err := cron.Parse(expr, time.UTC)
		require.Error(t, err, "%q", expr)
	}
}

// Daylight saving time in New York: 2025-03-09 02:00 EST becomes 03:00 EDT;
// 2025-11-02 02:00 EDT becomes 01:00 EST.
func TestDaylightSavingTime(t *testing.T) {
	t.Parallel()
	ny := zone(t, "America/New_York")
	spring := time.Date(2025, 3, 8, 12, 0, 0, 0, ny)
	require.Equal(t, []string{"2025-03-08T02:30:00-05:00", "2025-03-10T02:30:00-04:00"},
		ticks(t, "30 2 * * *", ny, spring.Add(-12*time.Hour), 2), "02:30 does not exist on 9 March: no tick that day")
	require.Equal(t, []string{"2025-03-09T01:30:00-05:00", "2025-03-09T03:30:00-04:00", "2025-03-10T01:30:00-04:00"},
		ticks(t, "30 1,3 * * *", ny, spring, 3))

	autumn := time.Date(2025, 11, 1, 12, 0, 0, 0, ny)
	require.Equal(t, []string{"2025-11-02T01:30:00-04:00", "2025-11-03T01:30:00-05:00"},
		ticks(t, "30 1 * * *", ny, autumn, 2), "01:30 occurs twice on 2 November: one tick")
	require.Equal(t, []string{"2025-11-02T00:00:00-04:00", "2025-11-02T01:00:00-04:00", "2025-11-02T01:00:00-05:00", "2025-11-02T02:00:00-05:00"},
		ticks(t, "0 * * * *", ny, time.Date(2025, 11, 1, 23, 30, 0, 0, ny), 4), "an hourly expression runs in both repeated hours")
}
