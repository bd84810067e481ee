package application

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// queueGlob is what a queue name pattern is made of: the characters of queue
// names and the wildcards * (any run of characters) and ?.
var queueGlob = regexp.MustCompile(`^(` + task.QueueNameSet + `|[*?]){1,` + strconv.Itoa(task.MaxQueueLength) + `}$`)

// Queues returns a page of queues by name (of the key's queues, for a key
// limited to some): those that hold tasks or have settings. With q.Names,
// the page is those of the named queues, in their order.
func (s *QueueService) Queues(ctx context.Context, q ports.QueueQuery) (ports.QueuePage, error) {
	if q.Names != nil {
		return s.namedQueues(ctx, q)
	}
	f := ports.QueueFilter{Prefix: q.Prefix, Pattern: q.Pattern, MinPending: q.MinPending, Paused: q.Paused, After: q.After, CountsOnly: q.CountsOnly}
	var v validation.Errors
	if q.Prefix != "" {
		task.CheckQueue(&v, "prefix", q.Prefix)
	}
	if q.Pattern != "" && !queueGlob.MatchString(q.Pattern) {
		v.Add("pattern", fmt.Sprintf("must be 1 to %d characters of %s, * (any characters) or ? (one character)",
			task.MaxQueueLength, task.QueueNameSet))
	}
	if q.MinPending != nil && *q.MinPending < 0 {
		v.Add("min_pending", "must be an integer, 0 or more")
	}
	if q.After != "" && !task.ValidQueue(q.After) {
		v.Add("cursor", "is not a cursor this API returned")
	}
	f.Limit = optionalCount(&v, "limit", q.Limit, DefaultListLimit, MaxListLimit)
	if err := v.Err(); err != nil {
		return ports.QueuePage{}, err
	}
	if p := ports.Principal(ctx); p.Restricted() {
		f.Visible = p.QueuePatterns()
	}
	page, err := s.stats.Queues(ctx, f)
	if err != nil {
		return ports.QueuePage{}, fmt.Errorf("queue statistics: %w", err)
	}
	return page, nil
}

// namedQueues is Queues for q.Names: the named queues the principal may
// see (others are left out, like missing ones), at most MaxListLimit.
func (s *QueueService) namedQueues(ctx context.Context, q ports.QueueQuery) (ports.QueuePage, error) {
	var v validation.Errors
	if len(q.Names) > MaxListLimit {
		v.Add("names", fmt.Sprintf("must name at most %d queues", MaxListLimit))
	}
	p := ports.Principal(ctx)
	names := make([]string, 0, len(q.Names))
	for _, n := range q.Names {
		task.CheckQueue(&v, "names", n)
		if p.QueueAllowed(n) {
			names = append(names, n)
		}
	}
	if err := v.Err(); err != nil {
		return ports.QueuePage{}, err
	}
	page, err := s.stats.Queues(ctx, ports.QueueFilter{Names: names, CountsOnly: q.CountsOnly})
	if err != nil {
		return ports.QueuePage{}, fmt.Errorf("queue statistics: %w", err)
	}
	return page, nil
}

// Queue returns one queue's statistics and detail.
func (s *QueueService) Queue(ctx context.Context, name string) (*ports.QueueDetail, error) {
	if err := checkQueueName(ctx, name); err != nil {
		return nil, err
	}
	d, err := s.stats.Queue(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("queue detail: %w", err)
	}
	return d, nil
}

// checkQueueName refuses a name that is not a queue name (422, field
// queue) and a queue the caller's key may not use (403).
func checkQueueName(ctx context.Context, name string) error {
	var v validation.Errors
	task.CheckQueue(&v, "queue", name)
	if err := v.Err(); err != nil {
		return err
	}
	return ports.Principal(ctx).CheckQueue(name)
}

// UpdateSettings applies p to the queue's settings in one transaction that
// also records event.AuditQueueSettingsChanged with the settings after the
// change (secrets left out). A queue that holds no tasks yet may have
// settings. The named limits p names must exist (they are locked against
// deletion until the change commits); a push URL must be allowed by the
// server's configuration. A change that turns push delivery on, or asks
// for a new secret, answers with the secret (the only time it is shown).
func (s *QueueService) UpdateSettings(ctx context.Context, name string, p queue.Patch) (ports.QueueSettings, error) {
	if err := checkQueueName(ctx, name); err != nil {
		return ports.QueueSettings{}, err
	}
	if err := p.Validate(); err != nil {
		return ports.QueueSettings{}, err
	}
	if err := s.push.checkPushAllowed(p); err != nil {
		return ports.QueueSettings{}, err
	}
	out := ports.QueueSettings{Queue: name}
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if p.Limits.Set && p.Limits.Value != nil && len(*p.Limits.Value) > 0 {
			missing, err := st.Limits.Missing(ctx, *p.Limits.Value)
			if err != nil {
				return err
			}
			if len(missing) > 0 {
				var v validation.Errors
				for i, n := range *p.Limits.Value {
					if slices.Contains(missing, n) {
						v.Add(fmt.Sprintf("limits[%d]", i), "no named limit "+n+": create it first (PUT /limits/v1/"+n+")")
					}
				}
				return v.Err()
			}
		}
		var err error
		out.Settings, out.UpdatedAt, err = st.QueueSettings.Update(ctx, name,
			func(cur queue.Settings, now time.Time) (queue.Settings, []event.Event, error) {
				if err := p.Check(cur); err != nil {
					return queue.Settings{}, nil, err
				}
				next := p.Apply(cur)
				secret, err := s.push.applyPushSecrets(name, p, cur.Push, next.Push, now)
				if err != nil {
					return queue.Settings{}, nil, err
				}
				out.NewSecret = secret
				audit := event.Audit(event.AuditQueueSettingsChanged, auditKeyID(ctx), now)
				audit.Queue = name
				saved := next.Clone()
				audit.Settings = &saved
				return next, []event.Event{audit}, nil
			})
		return err
	})
	if err != nil {
		return ports.QueueSettings{}, fmt.Errorf("update queue settings: %w", err)
	}
	return out, nil
}
