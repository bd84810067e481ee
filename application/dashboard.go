package application

import (
	"context"
	"fmt"
	"maps"

	"github.com/taskmaster/taskmaster/ports"
)

// SeriesMinutes is the length of the dashboard's per-minute series: the
// rate buckets are kept for an hour.
const SeriesMinutes = 60

// DashboardService implements ports.DashboardService.
type DashboardService struct {
	series ports.SeriesReader
	reader ports.DashboardReader
}

var _ ports.DashboardService = (*DashboardService)(nil)

// NewDashboardService returns the dashboard's read use cases.
func NewDashboardService(series ports.SeriesReader, reader ports.DashboardReader) *DashboardService {
	return &DashboardService{series: series, reader: reader}
}

// RateSeries implements ports.DashboardService.
func (s *DashboardService) RateSeries(ctx context.Context, queues []string) (map[string]ports.RateSeries, error) {
	out, _, err := s.series.RateSeries(ctx, queues, SeriesMinutes)
	if err != nil {
		return nil, fmt.Errorf("rate series: %w", err)
	}
	if p := ports.Principal(ctx); p.Restricted() {
		maps.DeleteFunc(out, func(q string, _ ports.RateSeries) bool { return !p.QueueAllowed(q) })
	}
	return out, nil
}

// Paused implements ports.DashboardService.
func (s *DashboardService) Paused(ctx context.Context) (map[string]bool, error) {
	out, err := s.reader.Paused(ctx)
	if err != nil {
		return nil, err
	}
	if p := ports.Principal(ctx); p.Restricted() {
		maps.DeleteFunc(out, func(q string, _ bool) bool { return !p.QueueAllowed(q) })
	}
	return out, nil
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
