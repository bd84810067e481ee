package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// Health implements ports.HealthChecker.
type Health struct {
	db *sqlx.DB
}

var _ ports.HealthChecker = (*Health)(nil)

// NewHealth returns a health checker over db.
func NewHealth(db *sqlx.DB) *Health { return &Health{db: db} }

// Ready reports nil when the database answers and every migration is
// applied.
func (h *Health) Ready(ctx context.Context) error {
	if err := h.db.PingContext(ctx); err != nil {
		return fmt.Errorf("database unreachable")
	}
	pending, err := Pending(ctx, h.db)
	if err != nil {
		return fmt.Errorf("cannot read migrations")
	}
	if len(pending) > 0 {
		return fmt.Errorf("migrations pending: %s", strings.Join(pending, ", "))
	}
	return nil
}
