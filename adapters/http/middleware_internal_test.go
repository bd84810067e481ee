package http

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// correlationPattern is the rule validCorrelationID checks by hand.
var correlationPattern = regexp.MustCompile(`^[A-Za-z0-9._:/=+-]{1,128}$`)

func FuzzValidCorrelationIDMatchesThePattern(f *testing.F) {
	for _, s := range []string{"", "a", "req-1", "a b", "ä", "x\n", strings.Repeat("a", 128), strings.Repeat("a", 129), "a/b:c=d+e.f_g", "a,b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		require.Equal(t, correlationPattern.MatchString(s), validCorrelationID(s), "%q", s)
	})
}
