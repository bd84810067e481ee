package postgres

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/ports"
)

// PushStore implements ports.PushStore over queue_settings and
// push_delivery_stats (migration 0021).
type PushStore struct {
	st *txState
}

var _ ports.PushStore = (*PushStore)(nil)

// pushQueuesSQL reads the push queues (the partial index
// queue_settings_push_queues) with their sealed secrets, leaving out a
// previous secret whose overlap is over.
const pushQueuesSQL = `
	SELECT ` + queueSettingsColumns + `, push_secret, push_headers,
		CASE WHEN push_previous_secret_expires_at > now() THEN push_previous_secret END AS push_previous_secret
	FROM queue_settings WHERE push_url IS NOT NULL ORDER BY queue`

// Queues implements ports.PushStore.
func (s *PushStore) Queues(ctx context.Context) ([]ports.PushQueue, error) {
	var rows []queueSettingsRow
	if err := s.st.tx.SelectContext(ctx, &rows, pushQueuesSQL); err != nil {
		return nil, fmt.Errorf("push queues: %w", err)
	}
	out := make([]ports.PushQueue, 0, len(rows))
	for i := range rows {
		st := rows[i].settings()
		if st.Push == nil {
			continue
		}
		out = append(out, ports.PushQueue{Queue: rows[i].Queue, Paused: st.Paused, Push: *st.Push})
	}
	return out, nil
}

// saveDeliveryStatsSQL replaces instance $1's rows: one per queue $2
// (in-flight $3, statuses and latencies $4 and $5, each an array literal),
// and none of other queues.
const saveDeliveryStatsSQL = `
	WITH gone AS (
		DELETE FROM push_delivery_stats WHERE instance = $1 AND NOT (queue = ANY($2::text[]))
	)
	INSERT INTO push_delivery_stats (queue, instance, in_flight, statuses, latency_ms, updated_at)
	SELECT u.queue, $1, u.in_flight, u.statuses::smallint[], u.latency_ms::integer[], now()
	FROM unnest($2::text[], $3::int[], $4::text[], $5::text[]) AS u(queue, in_flight, statuses, latency_ms)
	ON CONFLICT (queue, instance) DO UPDATE SET in_flight = excluded.in_flight, statuses = excluded.statuses,
		latency_ms = excluded.latency_ms, updated_at = excluded.updated_at`

// SaveDeliveryStats implements ports.PushStore.
func (s *PushStore) SaveDeliveryStats(ctx context.Context, instance string, stats []ports.DeliveryStats) error {
	queues := make(pq.StringArray, len(stats))
	inFlight := make(pq.Int64Array, len(stats))
	statuses := make(pq.StringArray, len(stats))
	latencies := make(pq.StringArray, len(stats))
	for i, d := range stats {
		queues[i], inFlight[i] = d.Queue, int64(d.InFlight)
		statuses[i], latencies[i] = intArrayLiteral(d.Statuses), intArrayLiteral(d.LatencyMillis)
	}
	if _, err := s.st.tx.ExecContext(ctx, saveDeliveryStatsSQL, instance, queues, inFlight, statuses, latencies); err != nil {
		return fmt.Errorf("save delivery stats: %w", err)
	}
	return nil
}

// intArrayLiteral is the array literal of vs: {1,2,3}.
func intArrayLiteral(vs []int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(v))
	}
	b.WriteByte('}')
	return b.String()
}

// PruneDeliveryStats implements ports.PushStore.
func (s *PushStore) PruneDeliveryStats(ctx context.Context, olderThan time.Duration) error {
	if _, err := s.st.tx.ExecContext(ctx, `DELETE FROM push_delivery_stats WHERE updated_at < now() - make_interval(secs => $1)`,
		olderThan.Seconds()); err != nil {
		return fmt.Errorf("prune delivery stats: %w", err)
	}
	return nil
}

// DeliveryStatsWindow is how recent a dispatcher's report must be to
// count in a queue's delivery summary.
const DeliveryStatsWindow = time.Minute

// ReadDeliverySummary merges the recent reports of every instance's
// dispatcher on queue's deliveries (nil when none reported within
// DeliveryStatsWindow).
func ReadDeliverySummary(ctx context.Context, q sqlx.QueryerContext, queue string) (*ports.DeliverySummary, error) {
	var rows []struct {
		InFlight  int           `db:"in_flight"`
		Statuses  pq.Int64Array `db:"statuses"`
		Latency   pq.Int64Array `db:"latency_ms"`
		UpdatedAt time.Time     `db:"updated_at"`
	}
	if err := sqlx.SelectContext(ctx, q, &rows, `
		SELECT in_flight, statuses, latency_ms, updated_at FROM push_delivery_stats
		WHERE queue = $1 AND updated_at > now() - make_interval(secs => $2) ORDER BY updated_at DESC`,
		queue, DeliveryStatsWindow.Seconds()); err != nil {
		return nil, fmt.Errorf("delivery stats: %w", err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	out := &ports.DeliverySummary{Statuses: map[int]int{}, AsOf: rows[0].UpdatedAt}
	var latencies []int64
	for i, r := range rows {
		out.InFlight += r.InFlight
		for _, st := range r.Statuses {
			out.Statuses[int(st)]++
		}
		if i == 0 && len(r.Statuses) > 0 {
			out.LastStatus = int(r.Statuses[0])
		}
		latencies = append(latencies, r.Latency...)
	}
	out.Count = len(latencies)
	if len(latencies) > 0 {
		slices.Sort(latencies)
		at := func(p float64) time.Duration {
			i := min(int(p*float64(len(latencies))), len(latencies)-1)
			return time.Duration(latencies[i]) * time.Millisecond
		}
		out.LatencyP50, out.LatencyP99 = at(0.50), at(0.99)
	}
	return out, nil
}
