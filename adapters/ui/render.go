package ui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// page is what every template gets.
type page struct {
	Title string
	// Nav names the navigation entry to mark current.
	Nav    string
	Viewer *viewer
	// Auth: the dashboard has logins (show the logout form).
	Auth bool
	// Flash is a message about the last action.
	Flash string
	// PollMillis is the live regions' refresh interval.
	PollMillis int64
	// Reads says where the page's reads came from, when a read replica
	// is configured.
	Reads string
	Data  any
}

// parsePages parses each page template with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := fs.ReadFile(files, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(files, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, name := range names {
		base := strings.TrimSuffix(path.Base(name), ".html")
		if base == "layout" {
			continue
		}
		body, err := fs.ReadFile(files, name)
		if err != nil {
			return nil, err
		}
		t, err := template.New(base).Funcs(funcs).Parse(string(layout))
		if err == nil {
			_, err = t.Parse(string(body))
		}
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", name, err)
		}
		out[base] = t
	}
	return out, nil
}

// fragmentHeader asks for one live region of a page instead of the page
// (static/app.js sends it).
const fragmentHeader = "X-UI-Fragment"

// render writes a page, or only its live region when asked, compressed
// when the browser accepts it.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	t := h.pages[name]
	if p.Viewer == nil {
		p.Viewer = viewerOf(r.Context())
	}
	if p.Viewer == nil {
		p.Viewer = &viewer{}
	}
	p.Auth = h.cfg.Auth
	p.PollMillis = h.cfg.PollInterval.Milliseconds()
	if p.Flash == "" {
		p.Flash = flashOf(r)
	}
	p.Reads = h.readNotice(r)
	root := "layout"
	if frag := r.Header.Get(fragmentHeader); frag != "" && t.Lookup("live") != nil {
		root = "live"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, root, p); err != nil {
		h.log.Error("dashboard: render", zap.String("page", name), zap.Error(err))
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	out, done := compressed(w, r)
	w.WriteHeader(status)
	_, _ = out.Write(buf.Bytes())
	done()
}

// pageError is an error shown as a page with its status.
type pageError struct {
	status int
	msg    string
}

func (e *pageError) Error() string { return e.msg }

// fail shows an error page: the use cases' errors map to statuses as the
// API maps them; unexpected ones are logged once and shown without detail.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := http.StatusInternalServerError, "Something went wrong; the error was logged."
	var (
		pe *pageError
		fe *apikey.ForbiddenError
		te *task.TransitionError
		ve *validation.Error
	)
	switch {
	case errors.As(err, &pe):
		status, msg = pe.status, pe.msg
	case errors.Is(err, task.ErrNotFound), errors.Is(err, worker.ErrNotFound), errors.Is(err, schedule.ErrNotFound),
		errors.Is(err, queue.ErrNotFound):
		status, msg = http.StatusNotFound, capitalize(rootMessage(err))+"."
	case errors.As(err, &fe):
		status, msg = http.StatusForbidden, "Refused: "+fe.Reason+"."
	case errors.As(err, &te):
		status, msg = http.StatusConflict, fmt.Sprintf("Not possible now: the task is %s.", te.From)
	case errors.As(err, &ve):
		status, msg = http.StatusUnprocessableEntity, ve.Error()
	case errors.Is(err, ports.ErrUnavailable):
		status, msg = http.StatusServiceUnavailable, "The database is unavailable; try again in a moment."
		w.Header().Set("Retry-After", "2")
	default:
		h.log.Error("dashboard", zap.String("path", r.URL.Path), zap.Error(err))
	}
	h.render(w, r, status, "error", page{Title: http.StatusText(status), Data: errorData{Status: status, Message: msg}})
}

type errorData struct {
	Status  int
	Message string
}

func rootMessage(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Flash messages: actions redirect with ?ok=<code>[&n=<count>]; only these
// fixed texts are shown, so a crafted link cannot put words on the page.
var flashes = map[string]string{
	"retried":         "Task retried: it is PENDING again.",
	"cancelled":       "Cancel requested.",
	"drained":         "Worker asked to drain: it claims nothing more.",
	"paused":          "Paused.",
	"resumed":         "Resumed.",
	"saved":           "Settings saved.",
	"bulk":            "Done: %s task(s) changed.",
	"bulkpart":        "Done: %s task(s) changed; the others had moved on or were held.",
	"workflow-cancel": "Workflow cancelled: %s task(s) cancelled or asked to stop.",
	"workflow-retry":  "Workflow retried: %s task(s) out of DEAD.",
}

func flashOf(r *http.Request) string {
	q := r.URL.Query()
	f, ok := flashes[q.Get("ok")]
	if !ok {
		return ""
	}
	if strings.Contains(f, "%s") {
		n, err := strconv.ParseInt(q.Get("n"), 10, 64)
		if err != nil {
			return ""
		}
		return fmt.Sprintf(f, strconv.FormatInt(n, 10))
	}
	return f
}

// afterAction reports whether r is the page an action redirected to (its
// address carries the action's outcome, ?ok=...).
func afterAction(r *http.Request) bool { return r.URL.Query().Has("ok") }

// readNotice says where the page's reads came from, when a read replica is
// configured: the replica and how far behind it was, or the primary and why.
func (h *Handler) readNotice(r *http.Request) string {
	if h.d.ReadSource == nil || h.d.Reads == nil {
		return ""
	}
	st := h.d.ReadSource.ReadStatus()
	switch {
	case afterAction(r):
		return "Read from the primary, to show your change."
	case st.OnReplica && st.Lag < 100*time.Millisecond:
		return "Read from a replica, caught up with the primary."
	case st.OnReplica:
		return fmt.Sprintf("Read from a replica, up to %s behind the primary.", roundLag(st.Lag))
	case st.Reason == "lagging":
		return fmt.Sprintf("Read from the primary: the replica is %s behind (more than %s).", roundLag(st.Lag), roundLag(st.MaxLag))
	default:
		return "Read from the primary: the replica is " + st.Reason + "."
	}
}

// roundLag rounds a lag for reading: tenths of a second under ten seconds,
// seconds above.
func roundLag(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// redirectDone sends the browser back to where after an action.
func redirectDone(w http.ResponseWriter, r *http.Request, where, code string, n ...int64) {
	u := where
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	u += sep + "ok=" + code
	if len(n) > 0 {
		u += "&n=" + strconv.FormatInt(n[0], 10)
	}
	http.Redirect(w, r, u, http.StatusSeeOther)
}

var funcs = template.FuncMap{
	"age":      fmtAge,
	"since":    fmtSince,
	"time":     fmtTime,
	"timePtr":  fmtTimePtr,
	"spark":    sparkline,
	"chart":    chart,
	"join":     strings.Join,
	"pathEsc":  pathEscape,
	"last":     lastOf,
	"lower":    strings.ToLower,
	"statuses": func() []task.Status { return task.Statuses },
	"reasons":  func() []task.DeadReason { return task.DeadReasons },
	"deref":    func(d *time.Duration) time.Duration { return *d },
	"derefInt": func(n *int) int { return *n },
	"seconds":  fmtSeconds,
	"mins":     func(d time.Duration) string { return strconv.Itoa(int(d.Minutes())) + " min" },
	"rows":     overviewRows,
	"pair": func(id fmt.Stringer, part string, v *jsonView) jsonPart {
		return jsonPart{ID: id.String(), Part: part, V: v}
	},
	"has":              func(ids []uuid.UUID, id uuid.UUID) bool { return slices.Contains(ids, id) },
	"statusOf":         fmtStatus,
	"deliveryStatuses": deliveryStatuses,
	"millis":           func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" },
	"host":             func(p *queue.Push) string { return p.Host() },
	"floatPtr":         func(f *float64) string { return strconv.FormatFloat(*f, 'f', 1, 64) },
	"bar":              progressBar,
	"deadTable": func(groups []ports.DeadCount, act bool, csrf string, bulk bool, empty string) deadTableView {
		return deadTableView{Groups: groups, Act: act, CSRF: csrf, Bulk: bulk, Empty: empty}
	},
}

// fmtStatus is an HTTP status, or "no response" for 0.
func fmtStatus(status int) string {
	if status == 0 {
		return "no response"
	}
	return strconv.Itoa(status)
}

// deliveryStatus is one answer status of a push queue's recent
// deliveries and how many had it.
type deliveryStatus struct {
	Status int
	Count  int
	// Class is the status's class for styling: ok (2xx), warn (429, 3xx,
	// 503) or bad.
	Class string
}

// deliveryStatuses orders a delivery summary's statuses, the most
// frequent first.
func deliveryStatuses(m map[int]int) []deliveryStatus {
	out := make([]deliveryStatus, 0, len(m))
	for status, n := range m {
		class := "bad"
		switch {
		case status >= 200 && status < 300:
			class = "ok"
		case status == 429 || status == 503 || (status >= 300 && status < 400):
			class = "warn"
		}
		out = append(out, deliveryStatus{Status: status, Count: n, Class: class})
	}
	slices.SortFunc(out, func(a, b deliveryStatus) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return a.Status - b.Status
	})
	return out
}

// progressView is what a progress bar shows: its value (0-100), its text
// and its accessible name.
type progressView struct {
	Value       float64
	Text, Label string
}

// progressBar is the bar of a progress report's percent (a float64 or a
// *float64), named label for assistive technology.
func progressBar(pct any, label string) progressView {
	var v float64
	switch p := pct.(type) {
	case float64:
		v = p
	case *float64:
		if p != nil {
			v = *p
		}
	}
	text := strconv.FormatFloat(v, 'f', -1, 64)
	if len(text) > 5 {
		text = strconv.FormatFloat(v, 'f', 1, 64)
	}
	return progressView{Value: v, Text: text + "%", Label: "progress of " + label}
}

// jsonPart is a payload or result with what its download link needs.
type jsonPart struct {
	ID, Part string
	V        *jsonView
}

func pathEscape(s string) string { return escapePath(s) }

// fmtAge prints a duration the way an operator reads it: 45s, 3m12s, 2h5m,
// 3d4h.
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func fmtSince(t time.Time) string { return fmtAge(time.Since(t)) + " ago" }

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "—"
	}
	return fmtTime(*t)
}

func lastOf(xs []int64) int64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

// fmtSeconds prints an average duration ("—" when none).
func fmtSeconds(s *float64) string {
	switch {
	case s == nil:
		return "—"
	case *s < 1:
		return fmt.Sprintf("%.0f ms", *s*1000)
	case *s < 60:
		return fmt.Sprintf("%.1f s", *s)
	default:
		return fmtAge(time.Duration(*s * float64(time.Second)))
	}
}
