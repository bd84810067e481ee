package ui

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// The run page (GET /ui/workflows/{id}): a run's counts, its graph drawn
// on the server as an SVG, and its tasks. The graph is laid out in layers
// (a task's layer is one below its deepest parent in the run); a layer
// wider than graphMaxWidth boxes shows its tasks collapsed into groups of
// one queue and status each, with their count, so that a fan-out of 1,000
// children is a handful of boxes, and edges join boxes (one line per pair
// of boxes, however many edges it stands for).

// Bounds of the drawn graph.
const (
	// graphTasks is the most tasks of a run the page reads for its graph.
	graphTasks = 2000
	// graphMaxWidth is the most boxes a layer shows.
	graphMaxWidth = 8
	// Box sizes and gaps, in SVG user units (pixels at 100%).
	boxW, boxH, gapX, gapY, margin = 200, 46, 16, 54, 12
	// boxChars is the most characters of a box's line (longer ones end
	// with "…"; the box's title has them whole).
	boxChars = 28
)

// graphBox is one box of the drawn graph: a task, or a group of tasks of
// one queue and status in one layer.
type graphBox struct {
	X, Y, W, H int
	// Label is the queue, Sub the task's short id and status, or the
	// group's count and status.
	Label, Sub string
	// Class is the status's (st-pending, ...) and "group" for a group.
	Class string
	// Href links a task's box to its page ("" for a group).
	Href string
	// Title is the box's accessible description.
	Title string
}

// graphLine is an edge between two boxes.
type graphLine struct {
	X1, Y1, X2, Y2 int
	// Class is "ignore" or "skip" for an edge under that failure policy
	// (drawn dashed), "" for fail.
	Class string
}

// graphView is a run's drawn graph.
type graphView struct {
	Width, Height int
	Boxes         []graphBox
	Lines         []graphLine
	// Drawn counts the tasks drawn, of Total in the run; Truncated says
	// the run has more than graphTasks.
	Drawn, Total int64
	Truncated    bool
	// Layers counts the layers; Collapsed the layers shown as groups.
	Layers, Collapsed int
}

// layoutGraph lays the graph of run out (see the top of this file). The
// run's first task (whose id is the run's) has the top layer to itself:
// the tasks it enqueued or spawned without depending on it come below it.
func layoutGraph(run uuid.UUID, g ports.WorkflowGraph, total int64) graphView {
	index := make(map[uuid.UUID]int, len(g.Nodes))
	for i, n := range g.Nodes {
		index[n.ID] = i
	}
	parents := make([][]int, len(g.Nodes))
	children := make([][]int, len(g.Nodes))
	for _, e := range g.Edges {
		p, okP := index[e.Parent]
		c, okC := index[e.Child]
		if okP && okC {
			parents[c] = append(parents[c], p)
			children[p] = append(children[p], c)
		}
	}
	// Layers by Kahn's order: a task's layer is one below its deepest
	// parent (the graph is acyclic by construction).
	depth := make([]int, len(g.Nodes))
	waiting := make([]int, len(g.Nodes))
	_, hasFirst := index[run]
	var queue []int
	for i, n := range g.Nodes {
		waiting[i] = len(parents[i])
		if waiting[i] == 0 {
			queue = append(queue, i)
			if hasFirst && n.ID != run {
				depth[i] = 1
			}
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, c := range children[i] {
			depth[c] = max(depth[c], depth[i]+1)
			if waiting[c]--; waiting[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	layers := [][]int{}
	for i, d := range depth {
		for len(layers) <= d {
			layers = append(layers, nil)
		}
		layers[d] = append(layers[d], i)
	}
	out := graphView{Drawn: int64(len(g.Nodes)), Total: total, Truncated: g.Truncated, Layers: len(layers)}
	boxOf := make([]int, len(g.Nodes)) // each task's box
	var boxPlace []float64             // each box's place in its layer
	width := 0
	for d, layer := range layers {
		// Order a layer by its tasks' parents' places (fewer crossings),
		// then queue and status (groups of like tasks side by side).
		place := make(map[int]float64, len(layer))
		for _, i := range layer {
			if len(parents[i]) == 0 {
				place[i] = float64(i)
				continue
			}
			s := 0.0
			for _, p := range parents[i] {
				s += boxPlace[boxOf[p]]
			}
			place[i] = s / float64(len(parents[i]))
		}
		slices.SortStableFunc(layer, func(a, b int) int {
			return cmp.Or(cmp.Compare(place[a], place[b]), strings.Compare(g.Nodes[a].Queue, g.Nodes[b].Queue),
				strings.Compare(string(g.Nodes[a].Status), string(g.Nodes[b].Status)))
		})
		var boxes []graphBox
		if len(layer) <= graphMaxWidth {
			for _, i := range layer {
				boxOf[i] = len(out.Boxes) + len(boxes)
				boxes = append(boxes, taskBox(g.Nodes[i]))
			}
		} else {
			out.Collapsed++
			boxes = groupBoxes(g.Nodes, layer, boxOf, len(out.Boxes))
		}
		y := margin + d*(boxH+gapY)
		for k := range boxes {
			boxes[k].X, boxes[k].Y, boxes[k].W, boxes[k].H = margin+k*(boxW+gapX), y, boxW, boxH
			boxPlace = append(boxPlace, float64(k))
		}
		width = max(width, len(boxes))
		out.Boxes = append(out.Boxes, boxes...)
	}
	// Center each layer on the widest.
	full := margin*2 + width*boxW + max(width-1, 0)*gapX
	for start := 0; start < len(out.Boxes); {
		end := start
		for end < len(out.Boxes) && out.Boxes[end].Y == out.Boxes[start].Y {
			end++
		}
		n := end - start
		shift := (full - (margin*2 + n*boxW + max(n-1, 0)*gapX)) / 2
		for k := start; k < end; k++ {
			out.Boxes[k].X += shift
		}
		start = end
	}
	out.Width, out.Height = max(full, boxW+2*margin), margin*2+len(layers)*boxH+max(len(layers)-1, 0)*gapY
	// One line per pair of boxes, the strongest policy's dash (fail: a
	// solid line when any edge of the pair is fail).
	type pair struct{ from, to int }
	lines := map[pair]string{}
	var pairs []pair
	for _, e := range g.Edges {
		p, okP := index[e.Parent]
		c, okC := index[e.Child]
		if !okP || !okC {
			continue
		}
		k := pair{boxOf[p], boxOf[c]}
		class := ""
		if e.OnFailure == task.OnFailureIgnore || e.OnFailure == task.OnFailureSkip {
			class = string(e.OnFailure)
		}
		prev, seen := lines[k]
		switch {
		case !seen:
			pairs = append(pairs, k)
			lines[k] = class
		case prev != class:
			lines[k] = "" // mixed: drawn solid
		}
	}
	for _, k := range pairs {
		a, b := out.Boxes[k.from], out.Boxes[k.to]
		out.Lines = append(out.Lines, graphLine{X1: a.X + a.W/2, Y1: a.Y + a.H, X2: b.X + b.W/2, Y2: b.Y, Class: lines[k]})
	}
	return out
}

// taskBox is one task's box: its queue, its status (and dead reason).
func taskBox(n ports.GraphNode) graphBox {
	status := string(n.Status)
	if n.DeadReason != "" {
		status += " · " + string(n.DeadReason)
	}
	return graphBox{
		Label: clip(n.Queue), Sub: clip(status), Class: "st-" + strings.ToLower(string(n.Status)),
		Href: "/ui/tasks/" + n.ID.String(), Title: fmt.Sprintf("task %s in %s: %s", n.ID, n.Queue, status),
	}
}

// clip cuts s to boxChars characters.
func clip(s string) string {
	if r := []rune(s); len(r) > boxChars {
		return string(r[:boxChars-1]) + "…"
	}
	return s
}

// groupBoxes collapses a wide layer into boxes of one queue and status
// each, the largest first; beyond graphMaxWidth boxes, the rest share one.
// It sets boxOf for the layer's tasks (boxes numbered from first).
func groupBoxes(nodes []ports.GraphNode, layer []int, boxOf []int, first int) []graphBox {
	type key struct {
		queue  string
		status task.Status
	}
	members := map[key][]int{}
	var keys []key
	for _, i := range layer {
		k := key{nodes[i].Queue, nodes[i].Status}
		if members[k] == nil {
			keys = append(keys, k)
		}
		members[k] = append(members[k], i)
	}
	slices.SortStableFunc(keys, func(a, b key) int { return cmp.Compare(len(members[b]), len(members[a])) })
	var boxes []graphBox
	for n, k := range keys {
		m := members[k]
		if len(m) == 1 && (n < graphMaxWidth-1 || len(keys) <= graphMaxWidth) {
			boxOf[m[0]] = first + len(boxes)
			boxes = append(boxes, taskBox(nodes[m[0]]))
			continue
		}
		if n == graphMaxWidth-1 && len(keys) > graphMaxWidth {
			// The rest, in one box.
			var rest []int
			for _, k := range keys[n:] {
				rest = append(rest, members[k]...)
			}
			for _, i := range rest {
				boxOf[i] = first + len(boxes)
			}
			boxes = append(boxes, graphBox{Label: "other queues", Sub: fmt.Sprintf("×%d · mixed", len(rest)), Class: "group",
				Title: fmt.Sprintf("%d more tasks of this layer", len(rest))})
			break
		}
		for _, i := range m {
			boxOf[i] = first + len(boxes)
		}
		boxes = append(boxes, graphBox{Label: clip(k.queue), Sub: fmt.Sprintf("×%d · %s", len(m), k.status),
			Class: "group st-" + strings.ToLower(string(k.status)),
			Title: fmt.Sprintf("%d tasks in %s: %s", len(m), k.queue, k.status)})
	}
	return boxes
}

// workflowData is the run page.
type workflowData struct {
	Summary *ports.WorkflowSummary
	Graph   graphView
	// Tasks are the first page of the run's tasks, oldest first.
	Tasks    []*task.Task
	More     bool
	ID       string
	CanRetry bool
	// CanCancel: a task of the run is unfinished.
	CanCancel bool
}

func (h *Handler) workflowPage(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || h.d.Workflows == nil {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "Workflow not found."})
		return
	}
	sum, g, err := h.d.Workflows.Graph(ctx, id, graphTasks)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	limit := pageSize
	first, err := h.d.Workflows.Workflow(ctx, ports.WorkflowQuery{ID: id, Limit: &limit})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	data := workflowData{Summary: sum, Graph: layoutGraph(id, g, sum.Total), Tasks: first.Tasks, More: first.Next != nil, ID: id.String(),
		CanRetry: sum.Counts[task.StatusDead] > 0, CanCancel: !sum.Finished}
	h.render(w, r, http.StatusOK, "workflow", page{Title: "Workflow " + id.String(), Nav: "overview", Data: data})
}

// workflowAction is a run's cancel or retry.
func (h *Handler) workflowAction(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || h.d.Workflows == nil {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "Workflow not found."})
		return
	}
	var res ports.WorkflowResult
	switch r.PathValue("action") {
	case "cancel":
		res, err = h.d.Workflows.Cancel(r.Context(), id)
	case "retry":
		res, err = h.d.Workflows.Retry(r.Context(), id)
	default:
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "No page has this address."})
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	redirectDone(w, r, "/ui/workflows/"+id.String(), "workflow-"+r.PathValue("action"), res.Changed)
}
