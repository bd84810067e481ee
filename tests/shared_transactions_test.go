package tests

import (
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The real server reports its shared transactions on /metrics, by kind: a
// claim alone is a claim transaction of one request; a batch report is a
// report transaction; concurrent claims share transactions, every request
// observed once (in _wait_seconds) and every transaction once (in
// _requests and _seconds).
func TestSharedTransactionsAreMetrics(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	api := throughputAPI{t, s.URL}
	const workers = 8
	for i := range workers {
		api.register("stx-w"+string(rune('a'+i)), "stx")
	}
	code, _ := api.do(http.MethodPost, "/tasks/v1", map[string]any{"queue": "stx"})
	require.Equal(t, http.StatusCreated, code)

	got := api.claim("stx-wa", 1, 0)
	require.Len(t, got, 1)
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_requests_count{kind="claim"}`))
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_requests_sum{kind="claim"}`))
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_wait_seconds_count{kind="claim"}`))
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_seconds_count{kind="claim"}`))
	require.Positive(t, scrape(t, s.URL, `taskmaster_shared_transaction_seconds_sum{kind="claim"}`))

	code, body := api.do(http.MethodPost, "/tasks/v1/complete", map[string]any{"worker_id": "stx-wa",
		"items": []map[string]any{{"id": got[0]["id"], "lease_id": got[0]["lease_id"]}}})
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_requests_count{kind="report"}`))
	require.Equal(t, 1.0, scrape(t, s.URL, `taskmaster_shared_transaction_wait_seconds_count{kind="report"}`))

	// Concurrent claims: however they were grouped, each request once.
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { api.claim("stx-w"+string(rune('a'+i)), 1, 0) })
	}
	wg.Wait()
	require.Equal(t, 1.0+workers, scrape(t, s.URL, `taskmaster_shared_transaction_wait_seconds_count{kind="claim"}`))
	require.Equal(t, 1.0+workers, scrape(t, s.URL, `taskmaster_shared_transaction_requests_sum{kind="claim"}`))
	txs := scrape(t, s.URL, `taskmaster_shared_transaction_requests_count{kind="claim"}`)
	require.Equal(t, txs, scrape(t, s.URL, `taskmaster_shared_transaction_seconds_count{kind="claim"}`))
	require.LessOrEqual(t, txs, 1.0+workers)
}
