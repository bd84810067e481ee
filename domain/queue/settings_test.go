package queue

import (
	"testing"
	"time"
)

func intp(v int) *int { return &v }

func TestAllowanceIsTheLeastOfTheLimits(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	rate := &RateLimit{PerSecond: 10, Burst: 5}
	cases := []struct {
		name string
		st   State
		want int
	}{
		{"nothing set", State{}, -1},
		{"paused", State{Settings: Settings{Paused: true, MaxRunning: intp(10)}}, 0},
		{"room under max_running", State{Settings: Settings{MaxRunning: intp(5)}, Running: 2}, 3},
		{"over max_running (lowered)", State{Settings: Settings{MaxRunning: intp(5)}, Running: 9}, 0},
		{"fresh bucket is full", State{Settings: Settings{RateLimit: rate}}, 5},
		{"bucket refilled for 0.25 s", State{Settings: Settings{RateLimit: rate}, Bucket: Bucket{Tokens: 0.5, At: now.Add(-250 * time.Millisecond)}}, 3},
		{"bucket caps at burst", State{Settings: Settings{RateLimit: rate}, Bucket: Bucket{Tokens: 0, At: now.Add(-time.Hour)}}, 5},
		{"clock went back refills nothing", State{Settings: Settings{RateLimit: rate}, Bucket: Bucket{Tokens: 2.5, At: now.Add(time.Second)}}, 2},
		{"both: the least", State{Settings: Settings{MaxRunning: intp(10), RateLimit: rate}, Running: 8}, 2},
	}
	for _, c := range cases {
		if got := c.st.Allowance(now); got != c.want {
			t.Errorf("%s: Allowance = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestBucketTakeLeavesTheRest(t *testing.T) {
	t.Parallel()
	r := RateLimit{PerSecond: 2, Burst: 4}
	now := time.Unix(1000, 0)
	b := Bucket{}.Take(r, now, 3)
	if b.Tokens != 1 || !b.At.Equal(now) {
		t.Fatalf("after taking 3 of a full bucket of 4: %+v", b)
	}
	if got := b.Level(r, now.Add(time.Second)); got != 3 {
		t.Fatalf("a second later: %v tokens, want 3", got)
	}
}

func TestGroupRoom(t *testing.T) {
	t.Parallel()
	if got := (Settings{}).GroupRoom(7); got != -1 {
		t.Fatalf("uncapped: %d", got)
	}
	s := Settings{MaxRunningPerGroup: intp(3)}
	if s.GroupRoom(1) != 2 || s.GroupRoom(3) != 0 || s.GroupRoom(5) != 0 {
		t.Fatal("room under the per-group cap")
	}
}

func TestPatchValidatesAndApplies(t *testing.T) {
	t.Parallel()
	yes := true
	if err := (Patch{}).Validate(); err == nil {
		t.Fatal("an empty patch is refused")
	}
	bad := Patch{MaxRunning: Optional[int]{Set: true, Value: intp(0)}, RateLimit: Optional[RateLimit]{Set: true, Value: &RateLimit{PerSecond: 0, Burst: 0}}}
	if err := bad.Validate(); err == nil {
		t.Fatal("zero max_running and an empty rate limit are refused")
	}
	p := Patch{Paused: &yes, MaxRunning: Optional[int]{Set: true, Value: intp(4)}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	s := p.Apply(Settings{MaxRunningPerGroup: intp(2)})
	if !s.Paused || *s.MaxRunning != 4 || *s.MaxRunningPerGroup != 2 {
		t.Fatalf("applied: %+v", s)
	}
	cleared := Patch{MaxRunning: Optional[int]{Set: true}}.Apply(s)
	if cleared.MaxRunning != nil || !cleared.Limited() {
		t.Fatalf("a null clears only that limit: %+v", cleared)
	}
}
