package application

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/taskmaster/taskmaster/ports"
)

// SeriesMinutes is the length of the dashboard's per-minute series: the
// rate buckets are kept for an hour.
const SeriesMinutes = 60

// Series cache: the dashboard polls its pages' queues' hour of per-minute
// counts every few seconds, and an hour of 1,000 busy queues is 240,000
// buckets. The service keeps in memory the hour of the queues its pages
// asked for lately (at most MaxSeriesQueues, the least recently asked
// dropped first, so that no number of queues makes it grow), and on each
// view reads only their last seriesRecentMinutes (the current and two
// previous minutes, which catch the projection's usual lag), shifting the
// hour along; it reads the whole hour of a queue the first time it is
// asked for, and of every kept queue when more than a minute passed since
// the last read or every seriesFullEvery (late buckets older than the
// recent window).
const (
	seriesRecentMinutes = 3
	seriesFullEvery     = 10 * time.Minute
	// seriesFresh is how long a read serves every viewer without another.
	seriesFresh = time.Second
	// MaxSeriesQueues is the most queues whose hour the service keeps,
	// and the most one RateSeries call may ask for.
	MaxSeriesQueues = 1000
)

// Active queues: the overview lists the busiest queues first. Their
// ranking costs a pass over the last activeMinutes of buckets (as many as
// queues were active then); it is shared by the viewers asking the same
// for activeFresh, for at most maxActiveCached rankings.
const (
	activeMinutes   = 5
	activeFresh     = 5 * time.Second
	maxActiveCached = 64
)

// DashboardService implements ports.DashboardService.
type DashboardService struct {
	series ports.SeriesReader
	reader ports.DashboardReader

	mu sync.Mutex // serializes reads of the series; guards the fields below
	// hour holds the kept queues' series ending at end (a database
	// minute); it is replaced, never changed, so callers may keep it.
	hour     map[string]ports.RateSeries
	asked    map[string]time.Time // when each kept queue was last asked for
	end      time.Time
	fullAt   time.Time // when the whole hour was last read
	recentAt time.Time // when the last read was

	activeMu sync.Mutex
	active   map[string]activeRanking // by pattern and visible queues
}

// activeRanking is one ranking of the busiest queues, and when it was read.
type activeRanking struct {
	names []string
	at    time.Time
}

var _ ports.DashboardService = (*DashboardService)(nil)

// NewDashboardService returns the dashboard's read use cases.
func NewDashboardService(series ports.SeriesReader, reader ports.DashboardReader) *DashboardService {
	return &DashboardService{series: series, reader: reader, asked: map[string]time.Time{}, active: map[string]activeRanking{}}
}

// RateSeries implements ports.DashboardService, from the kept hours.
func (s *DashboardService) RateSeries(ctx context.Context, queues []string) (map[string]ports.RateSeries, error) {
	if len(queues) > MaxSeriesQueues {
		return nil, fmt.Errorf("rate series: %d queues asked for, at most %d", len(queues), MaxSeriesQueues)
	}
	p := ports.Principal(ctx)
	var visible []string
	for _, q := range queues {
		if p.QueueAllowed(q) {
			visible = append(visible, q)
		}
	}
	out := map[string]ports.RateSeries{}
	if len(visible) == 0 {
		return out, nil
	}
	hour, err := s.hourOf(ctx, visible)
	if err != nil {
		return nil, fmt.Errorf("rate series: %w", err)
	}
	for _, q := range visible {
		if v, ok := hour[q]; ok {
			out[q] = v
		}
	}
	return out, nil
}

// hourOf returns the kept series over the hour ending now, queues' among
// them.
func (s *DashboardService) hourOf(ctx context.Context, queues []string) (map[string]ports.RateSeries, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	var missing []string
	for _, q := range queues {
		if _, kept := s.asked[q]; !kept {
			missing = append(missing, q)
		}
		s.asked[q] = now
	}
	s.forget(len(queues))
	switch {
	case s.hour == nil || time.Since(s.fullAt) >= seriesFullEvery:
		return s.readHour(ctx)
	case time.Since(s.recentAt) >= seriesFresh:
		full, err := s.readRecent(ctx)
		if err != nil || full {
			return s.hour, err
		}
	}
	if len(missing) == 0 {
		return s.hour, nil
	}
	// Queues asked for the first time: their whole hour, ending at the
	// kept hour's minute (else everything is read again).
	read, now2, err := s.series.RateSeries(ctx, missing, SeriesMinutes)
	if err != nil {
		return nil, err
	}
	if !now2.Truncate(time.Minute).Equal(s.end) {
		return s.readHour(ctx)
	}
	next := make(map[string]ports.RateSeries, len(s.hour)+len(read))
	for q, v := range s.hour {
		next[q] = v
	}
	for q, v := range read {
		next[q] = v
	}
	s.hour = next
	return s.hour, nil
}

// forget drops, beyond MaxSeriesQueues, the queues asked for least
// recently (keeping the newest asked ones, at least the n just asked for).
// s.mu is held.
func (s *DashboardService) forget(n int) {
	if len(s.asked) <= MaxSeriesQueues {
		return
	}
	byAge := make([]string, 0, len(s.asked))
	for q := range s.asked {
		byAge = append(byAge, q)
	}
	sort.Slice(byAge, func(i, j int) bool { return s.asked[byAge[i]].Before(s.asked[byAge[j]]) })
	drop := byAge[:len(s.asked)-max(MaxSeriesQueues, n)]
	next := make(map[string]ports.RateSeries, len(s.hour))
	for q, v := range s.hour {
		next[q] = v
	}
	for _, q := range drop {
		delete(s.asked, q)
		delete(next, q)
	}
	s.hour = next
}

// kept lists the queues whose hour is kept. s.mu is held.
func (s *DashboardService) kept() []string {
	out := make([]string, 0, len(s.asked))
	for q := range s.asked {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// readRecent reads the kept queues' last minutes and shifts their hour
// along, or, after a gap, reads it all again (full). s.mu is held.
func (s *DashboardService) readRecent(ctx context.Context) (full bool, err error) {
	recent, now, err := s.series.RateSeries(ctx, s.kept(), seriesRecentMinutes)
	if err != nil {
		return false, err
	}
	end := now.Truncate(time.Minute)
	shift := int(end.Sub(s.end) / time.Minute)
	if shift < 0 || shift > 1 {
		_, err := s.readHour(ctx)
		return true, err
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
	return false, nil
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

// readHour reads the kept queues' whole hour (s.mu held).
func (s *DashboardService) readHour(ctx context.Context) (map[string]ports.RateSeries, error) {
	hour, now, err := s.series.RateSeries(ctx, s.kept(), SeriesMinutes)
	if err != nil {
		return nil, err
	}
	s.hour, s.end = hour, now.Truncate(time.Minute)
	s.fullAt = time.Now()
	s.recentAt = s.fullAt
	return s.hour, nil
}

// ActiveQueues implements ports.DashboardService: the busiest queues of
// the last activeMinutes, by the events their statistics counted.
func (s *DashboardService) ActiveQueues(ctx context.Context, pattern string, limit int) ([]string, error) {
	var visible []string
	if p := ports.Principal(ctx); p.Restricted() {
		visible = p.QueuePatterns()
	}
	key := pattern + "\x00" + strconv.Itoa(limit) + "\x00" + strings.Join(visible, ",")
	s.activeMu.Lock()
	if r, ok := s.active[key]; ok && time.Since(r.at) < activeFresh {
		s.activeMu.Unlock()
		return r.names, nil
	}
	s.activeMu.Unlock()
	names, err := s.series.ActiveQueues(ctx, activeMinutes, limit, ports.QueueFilter{Pattern: pattern, Visible: visible})
	if err != nil {
		return nil, fmt.Errorf("active queues: %w", err)
	}
	s.activeMu.Lock()
	defer s.activeMu.Unlock()
	if len(s.active) >= maxActiveCached {
		for k, r := range s.active {
			if time.Since(r.at) >= activeFresh || len(s.active) >= maxActiveCached {
				delete(s.active, k)
			}
		}
	}
	s.active[key] = activeRanking{names: names, at: time.Now()}
	return names, nil
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
