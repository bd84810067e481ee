package task

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The hand-written checks of queue names and request ids accept exactly
// what the sets' regular expressions accept.
func TestNameChecksAgreeWithTheirSets(t *testing.T) {
	t.Parallel()
	queue := regexp.MustCompile(`^` + QueueNameSet + `{1,` + strconv.Itoa(MaxQueueLength) + `}$`)
	request := regexp.MustCompile(`^` + RequestIDSet + `{1,` + strconv.Itoa(MaxRequestIDLength) + `}$`)
	cases := []string{"", "a", "emails", "a.b_c:d-e", "a b", "a/b", "é", "\x00", "~", "!", " ", "\x7f",
		strings.Repeat("q", MaxQueueLength), strings.Repeat("q", MaxQueueLength+1),
		strings.Repeat("!", MaxRequestIDLength), strings.Repeat("!", MaxRequestIDLength+1)}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(140))
		for i := range b {
			b[i] = byte(r.IntN(256))
			if r.IntN(4) > 0 {
				b[i] = byte(32 + r.IntN(95)) // printable ASCII most of the time
			}
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		if got, want := ValidQueue(c), queue.MatchString(c); got != want {
			t.Fatalf("ValidQueue(%q) = %v, the set says %v", c, got, want)
		}
		if got, want := ValidRequestID(c), request.MatchString(c); got != want {
			t.Fatalf("ValidRequestID(%q) = %v, the set says %v", c, got, want)
		}
	}
}
