package application

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/taskmaster/taskmaster/ports"
)

// SeriesMinutes is the length of the dashboard's per-minute series: the
// rate buckets are kept for an hour.
const SeriesMinutes = 60

// Series cache: the dashboard polls every queue's hour of per-minute
// counts every few seconds, and an hour of 1,000 busy queues is 240,000
// buckets. The service keeps the hour in memory and, on each view, reads
// only the last seriesRecentMinutes (every queue's current and two
// previous minutes, which catch the projection's usual lag), shifting the
// hour along; it reads the whole hour again when the cache is empty, when
// more than a minute passed since the last read, or every
// seriesFullEvery (late buckets older than the recent window).
const (
	seriesRecentMinutes = 3
	seriesFullEvery     = 10 * time.Minute
	// seriesFresh is how long a read serves every viewer without another.
	seriesFresh = time.Second
)

// DashboardService implements ports.DashboardService.
type DashboardService struct {
	series ports.SeriesReader
	reader ports.DashboardReader

	mu sync.Mutex // serializes reads of the series; guards the fields below
	// hour holds every queue's series ending at end (a database minute);
	// it is replaced, never changed, so callers may keep it.
	hour     map[string]ports.RateSeries
	end      time.Time
	fullAt   time.Time // when the whole hour was last read
	recentAt time.Time // when the last read was
}

var _ ports.DashboardService = (*DashboardService)(nil)

// NewDashboardService returns the dashboard's read use cases.
func NewDashboardService(series ports.SeriesReader, reader ports.DashboardReader) *DashboardService {
	return &DashboardService{series: series, reader: reader}
}

// RateSeries implements ports.DashboardService, from the cached hour.
func (s *DashboardService) RateSeries(ctx context.Context, queues []string) (map[string]ports.RateSeries, error) {
	hour, err := s.currentHour(ctx)
	if err != nil {
		return nil, fmt.Errorf("rate series: %w", err)
	}
	p := ports.Principal(ctx)
	out := map[string]ports.RateSeries{}
	add := func(q string) {
		if v, ok := hour[q]; ok && p.QueueAllowed(q) {
			out[q] = v
		}
	}
	if queues == nil {
		for q := range hour {
			add(q)
		}
	}
	for _, q := range queues {
		add(q)
	}
	return out, nil
}

// currentHour returns every queue's series over the hour ending now.
func (s *DashboardService) currentHour(ctx context.Context) (map[string]ports.RateSeries, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hour != nil && time.Since(s.recentAt) < seriesFresh {
		return s.hour, nil
	}
	if s.hour == nil || time.Since(s.fullAt) >= seriesFullEvery {
		return s.readHour(ctx)
	}
	recent, now, err := s.series.RateSeries(ctx, nil, seriesRecentMinutes)
	if err != nil {
		return nil, err
	}
	end := now.Truncate(time.Minute)
	shift := int(end.Sub(s.end) / time.Minute)
	if shift < 0 || shift > 1 {
		return s.readHour(ctx)
	}
	// Shift every series along and replace its recent minutes by the
	// fresh read (zeros for a queue with no recent bucket).
	next := make(map[string]ports.RateSeries, max(len(s.hour), len(recent)))
	keep := SeriesMinutes - seriesRecentMinutes
	for q, old := range s.hour {
		next[q] = splice(old, shift, keep, recent[q])
	}
	for q, r := range recent {
		if _, ok := next[q]; !ok {
			next[q] = splice(ports.RateSeries{}, 0, keep, r)
		}
	}
	s.hour, s.end, s.recentAt = next, end, time.Now()
	return s.hour, nil
}

// splice returns old shifted left by shift minutes, its first keep
// minutes kept and the rest taken from recent (zeros when recent is empty).
func splice(old ports.RateSeries, shift, keep int, recent ports.RateSeries) ports.RateSeries {
	one := func(o, r []int64) []int64 {
		out := make([]int64, SeriesMinutes)
		if len(o) == SeriesMinutes {
			copy(out[:keep], o[shift:shift+keep])
		}
		copy(out[keep:], r)
		return out
	}
	return ports.RateSeries{Enqueued: one(old.Enqueued, recent.Enqueued), Claimed: one(old.Claimed, recent.Claimed),
		Completed: one(old.Completed, recent.Completed), DeadLettered: one(old.DeadLettered, recent.DeadLettered)}
}

// readHour reads every queue's whole hour (s.mu held).
func (s *DashboardService) readHour(ctx context.Context) (map[string]ports.RateSeries, error) {
	hour, now, err := s.series.RateSeries(ctx, nil, SeriesMinutes)
	if err != nil {
		return nil, err
	}
	s.hour, s.end = hour, now.Truncate(time.Minute)
	s.fullAt = time.Now()
	s.recentAt = s.fullAt
	return s.hour, nil
}

// HeldCounts implements ports.DashboardService.
func (s *DashboardService) HeldCounts(ctx context.Context) (map[string]int64, error) {
	return s.reader.HeldCounts(ctx)
}

// DeadCounts implements ports.DashboardService.
func (s *DashboardService) DeadCounts(ctx context.Context) ([]ports.DeadCount, error) {
	var visible []string
	if p := ports.Principal(ctx); p.Restricted() {
		visible = p.QueuePatterns()
	}
	return s.reader.DeadCounts(ctx, visible)
}
