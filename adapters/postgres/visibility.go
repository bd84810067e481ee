package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/lib/pq"
)

// visibleQueues is the condition of a listing restricted to an API key's
// queues (apikey.MatchQueue): $%d holds exact names, $%d prefixes (the
// patterns that ended in "*"). starts_with needs no escaping, unlike LIKE,
// for names holding "_".
const visibleQueues = `(queue = ANY($%d::text[]) OR EXISTS (
	SELECT 1 FROM unnest($%d::text[]) AS p(prefix) WHERE starts_with(queue, p.prefix)))`

// QueuePatterns splits an API key's queue patterns into exact names and
// prefixes (the patterns that ended in "*"), for readers outside this
// package that restrict a listing to a key's queues.
func QueuePatterns(patterns []string) (exact, prefixes pq.StringArray) {
	return queuePatterns(patterns)
}

// queuePatterns splits queue patterns into exact names and prefixes.
func queuePatterns(patterns []string) (exact, prefixes pq.StringArray) {
	exact, prefixes = pq.StringArray{}, pq.StringArray{}
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			prefixes = append(prefixes, prefix)
		} else {
			exact = append(exact, p)
		}
	}
	return exact, prefixes
}

// Owners implements ports.WorkerStore.
func (s *WorkerStore) Owners(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows []struct {
		ID    string `db:"id"`
		Owner string `db:"owner_key_id"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT id, owner_key_id FROM workers WHERE id = ANY($1::text[]) AND owner_key_id IS NOT NULL`,
		pq.StringArray(ids)); err != nil {
		return nil, fmt.Errorf("load worker owners: %w", err)
	}
	for _, r := range rows {
		out[r.ID] = r.Owner
	}
	return out, nil
}
