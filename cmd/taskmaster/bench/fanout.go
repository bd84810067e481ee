package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register("fanout", runFanout) }

// FanoutFigures are the fanout scenario's: a running task spawns
// --tasks children (10,000 by default: ten spawns of 1,000) and completes
// with a join that depends on every one of them; --workers workers
// complete the children in batches; the join is released in the
// transaction that completes the last one.
type FanoutFigures struct {
	Children      int `json:"children"`
	SpawnRequests int `json:"spawn_requests"`
	// Spawn is the spawns' phase: wall time and CPU (server, PostgreSQL).
	Spawn PhaseFigures `json:"spawn"`
	// JoinEnqueue is the complete that creates the join over every child.
	JoinEnqueue PhaseFigures `json:"join_enqueue"`
	// Children is completing them all (each completion counts the join
	// down under its row lock: a fan-in serializes on that row).
	ChildrenPhase     PhaseFigures `json:"children_phase"`
	ChildrenPerSecond float64      `json:"children_per_second"`
	// ReleaseMS is from the answer to the completion of the last child to
	// the answer of a claim of the join, which was waiting (long poll).
	ReleaseMS float64 `json:"release_ms"`
	// ParentsRead is the join reading every parent's result, 1,000 a
	// page.
	ParentsRead  PhaseFigures `json:"parents_read"`
	ParentsPages int          `json:"parents_pages"`
}

// PhaseFigures are one phase's wall time and CPU.
type PhaseFigures struct {
	Seconds         float64 `json:"seconds"`
	ServerSeconds   float64 `json:"server_cpu_seconds"`
	PostgresSeconds float64 `json:"postgres_cpu_seconds"`
}

// phase runs fn and measures it.
func phase(env *environment, fn func() error) (PhaseFigures, error) {
	c0 := readCPU(env)
	err := fn()
	c1 := readCPU(env)
	return PhaseFigures{Seconds: round3(c1.at.Sub(c0.at).Seconds()), ServerSeconds: round3(c1.server - c0.server),
		PostgresSeconds: round3(c1.postgres - c0.postgres)}, err
}

// runFanout runs the fanout scenario (see FanoutFigures).
func runFanout(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n <= 0 {
		n = 10000
	}
	if n > 10000 {
		return Report{}, errors.New("fanout: a join depends on at most 10,000 tasks (--tasks)")
	}
	workers := max(1, opts.Workers)
	a := newAPI(env.api.base, workers+4)
	a.key = env.api.key
	prefix := fmt.Sprintf("fanout-%d", time.Now().UnixNano())
	rootQ, kidQ, joinQ := prefix+"-root", prefix+"-kid", prefix+"-join"
	spawner := prefix + "-spawner"
	if err := a.register(ctx, spawner, rootQ); err != nil {
		return Report{}, err
	}
	if err := a.submit(ctx, submitItem{Queue: rootQ}); err != nil {
		return Report{}, err
	}
	roots, err := a.claim(ctx, spawner, rootQ, 1, 0)
	if err != nil {
		return Report{}, err
	}
	if len(roots) != 1 {
		return Report{}, fmt.Errorf("fanout: claimed %d roots", len(roots))
	}
	root := roots[0]
	fig := &FanoutFigures{Children: n}

	fmt.Fprintf(log, "[fanout] spawning %d children, 1,000 a request\n", n)
	ids := make([]string, 0, n)
	fig.Spawn, err = phase(env, func() error {
		for len(ids) < n {
			items := make([]submitItem, min(1000, n-len(ids)))
			for i := range items {
				items[i] = submitItem{Queue: kidQ}
			}
			var out struct {
				Tasks []claimedTask `json:"tasks"`
			}
			if _, err := a.post(ctx, "/tasks/v1/"+root.ID+"/spawn", map[string]any{"worker_id": spawner, "lease_id": root.LeaseID,
				"tasks": items}, &out); err != nil {
				return err
			}
			for _, t := range out.Tasks {
				ids = append(ids, t.ID)
			}
			fig.SpawnRequests++
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}

	fmt.Fprintf(log, "[fanout] completing the spawner with a join over the %d children\n", n)
	var joinID string
	fig.JoinEnqueue, err = phase(env, func() error {
		var out struct {
			Enqueued []claimedTask `json:"enqueued"`
		}
		if _, err := a.post(ctx, "/tasks/v1/"+root.ID+"/complete", map[string]any{"worker_id": spawner, "lease_id": root.LeaseID,
			"enqueue": []map[string]any{{"queue": joinQ, "depends_on": ids}}}, &out); err != nil {
			return err
		}
		if len(out.Enqueued) != 1 {
			return fmt.Errorf("fanout: the complete enqueued %d tasks", len(out.Enqueued))
		}
		joinID = out.Enqueued[0].ID
		return nil
	})
	if err != nil {
		return Report{}, err
	}

	// The join's worker waits for it (long poll) while the children run.
	joiner := prefix + "-joiner"
	if err := a.register(ctx, joiner, joinQ); err != nil {
		return Report{}, err
	}
	var (
		lastDone atomic.Int64 // unix nanos of the last child's completion answer
		joinAt   = make(chan time.Time, 1)
		joinErr  = make(chan error, 1)
	)
	jctx, cancelJoin := context.WithCancel(ctx)
	defer cancelJoin()
	go func() {
		for jctx.Err() == nil {
			got, err := a.claim(jctx, joiner, joinQ, 1, 30000)
			if err != nil {
				joinErr <- err
				return
			}
			if len(got) == 1 {
				joinAt <- time.Now()
				return
			}
		}
	}()

	fmt.Fprintf(log, "[fanout] %d workers completing the children (claims of %d, batch completes)\n", workers, opts.ClaimLimit)
	var done atomic.Int64
	fig.ChildrenPhase, err = phase(env, func() error {
		stop := make(chan struct{})
		go progress(log, "fanout", mon, stop, func() string { return fmt.Sprintf("%d of %d children done", done.Load(), n) })
		defer close(stop)
		errs := make(chan error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("%s-w%d", prefix, w)
				if err := a.register(ctx, id, kidQ); err != nil {
					errs <- err
					return
				}
				for done.Load() < int64(n) && ctx.Err() == nil {
					tasks, err := a.claim(ctx, id, kidQ, max(1, opts.ClaimLimit), 200)
					if err != nil {
						errs <- err
						return
					}
					if len(tasks) == 0 {
						continue
					}
					if err := a.completeBatch(ctx, id, tasks); err != nil {
						errs <- err
						return
					}
					lastDone.Store(time.Now().UnixNano())
					done.Add(int64(len(tasks)))
				}
			}()
		}
		wg.Wait()
		close(errs)
		return <-errs
	})
	if err != nil {
		return Report{}, err
	}
	fig.ChildrenPerSecond = round1(float64(n) / fig.ChildrenPhase.Seconds)
	select {
	case at := <-joinAt:
		fig.ReleaseMS = round3(float64(at.UnixNano()-lastDone.Load()) / 1e6)
	case err := <-joinErr:
		return Report{}, err
	case <-time.After(time.Minute):
		return Report{}, errors.New("fanout: the join was not handed out a minute after its last parent finished")
	}

	fmt.Fprintf(log, "[fanout] the join reads its %d parents\n", n)
	fig.ParentsRead, err = phase(env, func() error {
		cursor := ""
		for read := 0; ; {
			path := "/tasks/v1/" + joinID + "/parents?limit=1000"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			var page struct {
				Parents    []claimedTask `json:"parents"`
				NextCursor *string       `json:"next_cursor"`
			}
			body, err := a.getStatus(ctx, path)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return err
			}
			fig.ParentsPages++
			read += len(page.Parents)
			if page.NextCursor == nil {
				if read != n {
					return fmt.Errorf("fanout: the join read %d parents, not %d", read, n)
				}
				return nil
			}
			cursor = *page.NextCursor
		}
	})
	if err != nil {
		return Report{}, err
	}
	total := fig.Spawn.Seconds + fig.JoinEnqueue.Seconds + fig.ChildrenPhase.Seconds + fig.ParentsRead.Seconds
	return Report{
		Tasks: n + 2, Producers: 1, Workers: workers, Finished: int64(n + 1),
		DurationSeconds: round3(total), Fanout: fig,
	}, nil
}

func printFanout(w io.Writer, f *FanoutFigures) {
	if f == nil {
		return
	}
	row := func(name string, p PhaseFigures, more string) {
		fmt.Fprintf(w, "  %-17s %8.3f s, server CPU %7.3f s, postgres CPU %7.3f s%s\n", name+":", p.Seconds, p.ServerSeconds, p.PostgresSeconds, more)
	}
	fmt.Fprintf(w, "  fanout:           %d children\n", f.Children)
	row("spawn", f.Spawn, fmt.Sprintf(" (%d requests)", f.SpawnRequests))
	row("join enqueue", f.JoinEnqueue, "")
	row("children done", f.ChildrenPhase, fmt.Sprintf(" (%.0f/s)", f.ChildrenPerSecond))
	fmt.Fprintf(w, "  release:          last child's completion to the join's claim %.1f ms\n", f.ReleaseMS)
	row("parents read", f.ParentsRead, fmt.Sprintf(" (%d pages)", f.ParentsPages))
}
