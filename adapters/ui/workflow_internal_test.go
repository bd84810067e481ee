package ui

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// graphOf is a run: a root, n children of the root (every tenth DEAD, the
// rest DONE; a few in another queue), and a join on the children.
func graphOf(n int) ports.WorkflowGraph {
	id := func(i int) uuid.UUID { return uuid.MustParse(fmt.Sprintf("00000000-0000-7000-8000-%012d", i)) }
	g := ports.WorkflowGraph{Nodes: []ports.GraphNode{{ID: id(0), Queue: "root", Status: task.StatusDone}}}
	for i := 1; i <= n; i++ {
		st, q := task.StatusDone, "child"
		if i%10 == 0 {
			st = task.StatusDead
		}
		if i%100 == 0 {
			q = "other"
		}
		g.Nodes = append(g.Nodes, ports.GraphNode{ID: id(i), Queue: q, Status: st})
		g.Edges = append(g.Edges, ports.Dependency{Parent: id(0), Child: id(i)},
			ports.Dependency{Parent: id(i), Child: id(n + 1), OnFailure: task.OnFailureIgnore})
	}
	g.Nodes = append(g.Nodes, ports.GraphNode{ID: id(n + 1), Queue: "join", Status: task.StatusBlocked})
	return g
}

// A fan-out of 1,000 is drawn in three layers of a few boxes: the
// children grouped by queue and status with their counts, one line per
// pair of boxes; the page stays a few boxes wide.
func TestLayoutCollapsesWideLayers(t *testing.T) {
	t.Parallel()
	v := layoutGraph(uuid.Nil, graphOf(1000), 1002)
	require.Equal(t, 3, v.Layers)
	require.Equal(t, 1, v.Collapsed)
	var subs []string
	for _, b := range v.Boxes {
		subs = append(subs, b.Label+" "+b.Sub)
	}
	require.Equal(t, []string{
		"root DONE", "child ×900 · DONE", "child ×90 · DEAD", "other ×10 · DEAD", "join BLOCKED",
	}, subs)
	require.Len(t, v.Lines, 6, "root to each group, each group to the join")
	dashed := 0
	for _, l := range v.Lines {
		if l.Class == "ignore" {
			dashed++
			require.Equal(t, v.Boxes[4].Y, l.Y2, "the edges under ignore go into the join")
		}
	}
	require.Equal(t, 3, dashed, "edges under ignore are dashed")
	require.Less(t, v.Width, 1000, "readable: a few boxes wide")
	require.Less(t, v.Height, 400)
	// Boxes of a layer do not overlap, and lines join box edges.
	for i, a := range v.Boxes {
		for _, b := range v.Boxes[i+1:] {
			overlap := a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
			require.False(t, overlap, "%v and %v", a, b)
		}
	}
	require.Equal(t, v.Boxes[0].Y+boxH, v.Lines[0].Y1)

	// A narrow run shows every task, linked to its page.
	small := layoutGraph(uuid.Nil, graphOf(3), 5)
	require.Zero(t, small.Collapsed)
	require.Len(t, small.Boxes, 5)
	for _, b := range small.Boxes {
		require.Contains(t, b.Href, "/ui/tasks/")
	}
	// A layer with more kinds than fit shows the rest in one box.
	many := ports.WorkflowGraph{}
	for i := range 40 {
		many.Nodes = append(many.Nodes, ports.GraphNode{ID: uuid.New(), Queue: fmt.Sprintf("q%02d", i), Status: task.StatusPending})
	}
	v = layoutGraph(uuid.Nil, many, 40)
	require.Len(t, v.Boxes, graphMaxWidth)
	require.Equal(t, "other queues", v.Boxes[graphMaxWidth-1].Label)
	require.Equal(t, "×33 · mixed", v.Boxes[graphMaxWidth-1].Sub)

	// The run's first task has the top layer to itself: what it spawned
	// without depending on it comes below it; a group of one is a task.
	spawned := graphOf(0)
	first := spawned.Nodes[0].ID
	for i := range 20 {
		spawned.Nodes = append(spawned.Nodes, ports.GraphNode{ID: uuid.New(), Queue: "kid", Status: task.StatusPending})
		if i == 0 {
			spawned.Nodes[len(spawned.Nodes)-1].Status = task.StatusRunning
		}
	}
	v = layoutGraph(first, spawned, 22)
	require.Equal(t, 2, v.Layers)
	require.Equal(t, "root", v.Boxes[0].Label)
	require.Less(t, v.Boxes[0].Y, v.Boxes[1].Y)
	require.Equal(t, "kid", v.Boxes[1].Label)
	require.Equal(t, "×19 · PENDING", v.Boxes[1].Sub)
	require.Equal(t, "join", v.Boxes[2].Label)
	require.Contains(t, v.Boxes[3].Href, "/ui/tasks/", "the one RUNNING kid is drawn as itself")
	require.Contains(t, v.Boxes[3].Sub, "RUNNING")
	long := layoutGraph(uuid.Nil, ports.WorkflowGraph{Nodes: []ports.GraphNode{{ID: first, Queue: strings.Repeat("q", 128),
		Status: task.StatusDead, DeadReason: task.DeadDependencySkipped}}}, 1)
	require.Equal(t, strings.Repeat("q", boxChars-1)+"…", long.Boxes[0].Label)
	require.Equal(t, "DEAD · dependency_skipped", long.Boxes[0].Sub)
	require.Contains(t, long.Boxes[0].Title, strings.Repeat("q", 128))
}
