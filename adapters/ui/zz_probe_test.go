//go:build !race

package ui_test

import (
	"context"
	"testing"
	"time"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
)

func TestProbe(t *testing.T) {
	db := pgtest.NewDB(t)
	fillQueues(t, db, manyQueues)
	stats := outbox.NewStatsReader(db)
	dash := application.NewDashboardService(stats, postgres.NewDashboardReader(db))
	ctx := context.Background()
	h := overviewHandler(t, db)
	for range 4 {
		s := time.Now()
		_, err := stats.Queues(ctx)
		t.Log("queues", time.Since(s), err)
		s = time.Now()
		_, err = dash.RateSeries(ctx, nil)
		t.Log("series (cached)", time.Since(s), err)
		s = time.Now()
		_, err = dash.Paused(ctx)
		t.Log("paused", time.Since(s), err)
		s = time.Now()
		getOverview(t, h)
		t.Log("page", time.Since(s))
		time.Sleep(1100 * time.Millisecond)
	}
}
