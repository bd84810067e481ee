package postgres

import (
	"context"
	"fmt"
	"sort"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// TouchEach implements ports.WorkerStore: Touch for several workers, with
// one statement to read them and one to save those fn changed. It serves
// the shared transactions of reports, whose plans it pins first
// (reportPlanSettings).
func (s *WorkerStore) TouchEach(ctx context.Context, ids []string, fn ports.WorkerTouchFunc) ([]ports.WorkerResult, error) {
	if err := s.st.pinPlans(ctx, reportPlans); err != nil {
		return nil, fmt.Errorf("touch workers: %w", err)
	}
	return s.touchEach(ctx, ids, fn, false)
}

// TouchLiveEach implements ports.WorkerStore: TouchLive for several
// workers, their liveness locks taken with one statement. It begins the
// shared transactions of claims, whose plans it pins first
// (claimPlanSettings).
func (s *WorkerStore) TouchLiveEach(ctx context.Context, ids []string, fn ports.WorkerTouchFunc) ([]ports.WorkerResult, error) {
	if err := s.st.pinPlans(ctx, claimPlans); err != nil {
		return nil, fmt.Errorf("touch workers: %w", err)
	}
	return s.touchEach(ctx, ids, fn, true)
}

func (s *WorkerStore) touchEach(ctx context.Context, ids []string, fn ports.WorkerTouchFunc, live bool) ([]ports.WorkerResult, error) {
	out := make([]ports.WorkerResult, len(ids))
	var storable pq.StringArray
	for i, id := range ids {
		out[i] = ports.WorkerResult{ID: id, Err: worker.ErrNotFound}
		if storableText(id) {
			storable = append(storable, id)
		}
	}
	if len(storable) == 0 {
		return out, nil
	}
	sort.Strings(storable)
	if live {
		// Shared locks do not wait for each other; the reaper's exclusive
		// ones never wait: any order is deadlock-free.
		if _, err := s.st.tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock_shared($1, hashtext(id)) FROM unnest($2::text[]) AS id`,
			workerLivenessLock, storable); err != nil {
			return nil, fmt.Errorf("lock workers' liveness: %w", err)
		}
	}
	// Read after the locks, in a statement of its own: its snapshot then
	// includes whatever a reaper that held a lock committed.
	rows, err := selectRows(ctx, s.st.tx, workerRowNowFields, `SELECT `+workerColumns+`, now() AS db_now FROM workers WHERE id = ANY($1)`, storable)
	if err != nil {
		return nil, fmt.Errorf("load workers: %w", err)
	}
	if len(rows) == 0 {
		return out, nil
	}
	now := rows[0].Now
	s.st.setNow(now)
	byID := make(map[string]*workerRowNow, len(rows))
	for i := range rows {
		byID[rows[i].ID] = &rows[i]
	}
	type change struct {
		row    *workerRowNow
		w      *worker.Worker
		events []event.Event
	}
	var changes []change
	decided := make(map[string]*worker.Worker, len(rows))
	failed := make(map[string]error)
	for id, row := range byID {
		w := row.toDomain()
		events, changed, err := fn(w, now)
		decided[id] = w
		if err != nil {
			failed[id] = err
			continue
		}
		if changed {
			changes = append(changes, change{row: row, w: w, events: events})
		}
	}
	if len(changes) > 0 {
		sort.Slice(changes, func(i, j int) bool { return changes[i].row.ID < changes[j].row.ID })
		var (
			cids, statuses, oldStatuses pq.StringArray
			beats, oldBeats             pq.StringArray
		)
		for _, c := range changes {
			v := c.w.Snapshot()
			cids = append(cids, v.ID)
			statuses = append(statuses, string(v.Status))
			beats = append(beats, timeText(v.LastHeartbeatAt))
			oldStatuses = append(oldStatuses, c.row.Status)
			oldBeats = append(oldBeats, timeText(c.row.LastHeartbeatAt))
		}
		// Saved only where the row still holds what was read (Touch).
		var saved []string
		if err := s.st.tx.SelectContext(ctx, &saved, `
			UPDATE workers w SET status = u.status, last_heartbeat_at = u.beat::timestamptz
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(id, status, beat, old_status, old_beat)
			WHERE w.id = u.id AND w.status = u.old_status AND w.last_heartbeat_at = u.old_beat::timestamptz
			RETURNING w.id`, cids, statuses, beats, oldStatuses, oldBeats); err != nil {
			return nil, fmt.Errorf("touch workers: %w", err)
		}
		applied := make(map[string]bool, len(saved))
		for _, id := range saved {
			applied[id] = true
		}
		for _, c := range changes {
			if applied[c.row.ID] {
				s.st.Record(c.events...)
			}
		}
	}
	for i, id := range ids {
		if w, ok := decided[id]; ok {
			out[i] = ports.WorkerResult{ID: id, Worker: w, Err: failed[id]}
		}
	}
	return out, nil
}
