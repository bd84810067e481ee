package application

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/ports"
)

// A completed delivery's result is the answer's JSON when it is whole and
// storable, else its text as a JSON string; an empty answer is no result.
func TestResultOfAnAnswer(t *testing.T) {
	t.Parallel()
	require.Nil(t, resultOf(nil, false))
	require.Nil(t, resultOf([]byte(" \n"), false))
	require.JSONEq(t, `{"id":7}`, string(resultOf([]byte(`{"id":7}`), false)))
	require.Equal(t, `"ok"`, string(resultOf([]byte(`ok`), false)))
	require.Equal(t, `"{\"id\":"`, string(resultOf([]byte(`{"id":`), true)), "a cut answer is text")
	require.Equal(t, `"{\"a\":\"\\u0000\"}"`, string(resultOf([]byte(`{"a":"\u0000"}`), false)), "JSONB cannot hold \\u0000")
	s := string(resultOf([]byte("a\x00b\xff"), false))
	var text string
	require.NoError(t, json.Unmarshal([]byte(s), &text))
	require.Equal(t, "a\uFFFDb\uFFFD", text)
}

func TestFailureText(t *testing.T) {
	t.Parallel()
	require.Equal(t, "HTTP 500", failureText(ports.DeliveryResponse{Status: 500}))
	require.Equal(t, "HTTP 503: busy", failureText(ports.DeliveryResponse{Status: 503, Body: []byte(" busy\n")}))
	require.Equal(t, "HTTP 302 (redirects are not followed; Location: https://x/)",
		failureText(ports.DeliveryResponse{Status: 302, Location: "https://x/"}))
	long := failureText(ports.DeliveryResponse{Status: 400, Body: []byte(strings.Repeat("é", 1000))})
	require.True(t, strings.HasSuffix(long, "…"))
	require.LessOrEqual(t, len(long), len("HTTP 400: ")+pushErrorExcerpt+len("…"))
	require.True(t, strings.HasPrefix(long, "HTTP 400: éé"))
	require.Equal(t, "HTTP 400: x…", failureText(ports.DeliveryResponse{Status: 400, Body: []byte("x"), Truncated: true}))
}

// slots: acquire waits for a free slot; tryAcquire takes what is free;
// a smaller size holds new acquisitions until enough slots are given back;
// a larger one wakes the waiters.
func TestSlots(t *testing.T) {
	t.Parallel()
	s := newSlots(2)
	require.NoError(t, s.acquire(t.Context()))
	require.Equal(t, 1, s.tryAcquire(5))
	require.Zero(t, s.tryAcquire(1))
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	require.Error(t, s.acquire(ctx), "full: acquire waits until its context ends")

	got := make(chan error, 1)
	go func() { got <- s.acquire(t.Context()) }()
	s.release(1)
	require.NoError(t, <-got)

	s.setCap(1)
	s.release(1)
	require.Zero(t, s.tryAcquire(1), "2 in use under a size of 1: still full after one is given back")
	s.release(1)
	require.Equal(t, 1, s.tryAcquire(3))

	go func() { got <- s.acquire(t.Context()) }()
	s.setCap(2)
	require.NoError(t, <-got, "a larger size wakes a waiter")
}

func TestDeliveryRingKeepsTheLastDeliveriesNewestFirst(t *testing.T) {
	t.Parallel()
	var r deliveryRing
	_, changed := r.snapshot()
	require.False(t, changed)
	for i := range pushStatsKept + 3 {
		r.add(200+i, time.Duration(i)*time.Millisecond)
	}
	st, changed := r.snapshot()
	require.True(t, changed)
	require.Len(t, st.Statuses, pushStatsKept)
	require.Equal(t, 200+pushStatsKept+2, st.Statuses[0])
	require.Equal(t, pushStatsKept+2, st.LatencyMillis[0])
	require.Equal(t, 203, st.Statuses[pushStatsKept-1])
	_, changed = r.snapshot()
	require.False(t, changed)
}
