package ui

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// queueSettings pauses or resumes a queue, or sets its limits (an empty
// field clears that limit; push delivery is left to the API).
func (h *Handler) queueSettings(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	var p queue.Patch
	code := "saved"
	switch r.PostFormValue("op") {
	case "pause":
		t := true
		p.Paused, code = &t, "paused"
	case "resume":
		f := false
		p.Paused, code = &f, "resumed"
	case "limits":
		var v validation.Errors
		p.MaxRunning = optionalInt(&v, r, "max_running")
		p.MaxRunningPerGroup = optionalInt(&v, r, "max_running_per_group")
		p.DefaultTimeoutSeconds = optionalInt(&v, r, "default_timeout_seconds")
		p.RateLimit = optionalRate(&v, r, "rate_per_second", "rate_burst", "rate_limit")
		p.RateLimitPerGroup = optionalRate(&v, r, "rate_per_second_per_group", "rate_burst_per_group", "rate_limit_per_group")
		p.Limits = limitNames(r)
		if err := v.Err(); err != nil {
			h.fail(w, r, err)
			return
		}
	default:
		h.fail(w, r, &pageError{status: http.StatusBadRequest, msg: "Choose pause, resume or save limits."})
		return
	}
	if _, err := h.d.Queues.UpdateSettings(r.Context(), name, p); err != nil {
		h.fail(w, r, err)
		return
	}
	redirectDone(w, r, "/ui/queues/"+escapePath(name), code)
}

// optionalInt reads a limit field: empty clears the limit.
func optionalInt(v *validation.Errors, r *http.Request, field string) queue.Optional[int] {
	raw := strings.TrimSpace(r.PostFormValue(field))
	if raw == "" {
		return queue.Optional[int]{Set: true}
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		v.Add(field, "must be a whole number, or empty for no limit")
		return queue.Optional[int]{}
	}
	return queue.Optional[int]{Set: true, Value: &n}
}

// optionalRate reads a rate limit's two fields (rate and burst; setting
// is the API's name, for errors): both empty clears it.
func optionalRate(v *validation.Errors, r *http.Request, rate, burst, setting string) queue.Optional[queue.RateLimit] {
	ps := strings.TrimSpace(r.PostFormValue(rate))
	b := strings.TrimSpace(r.PostFormValue(burst))
	if ps == "" && b == "" {
		return queue.Optional[queue.RateLimit]{Set: true}
	}
	perSecond, err1 := strconv.ParseFloat(ps, 64)
	n, err2 := strconv.Atoi(b)
	if err1 != nil {
		v.Add(setting+".per_second", "must be a number (both rate fields, or neither)")
	}
	if err2 != nil {
		v.Add(setting+".burst", "must be a whole number (both rate fields, or neither)")
	}
	if err1 != nil || err2 != nil {
		return queue.Optional[queue.RateLimit]{}
	}
	return queue.Optional[queue.RateLimit]{Set: true, Value: &queue.RateLimit{PerSecond: perSecond, Burst: n}}
}

// limitNames reads the named limits field, comma-separated: empty names
// none. The names are checked where every patch is (queue.Patch.Validate,
// and that each exists).
func limitNames(r *http.Request) queue.Optional[[]string] {
	var names []string
	for _, n := range strings.Split(r.PostFormValue("limits"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return queue.Optional[[]string]{Set: true, Value: &names}
}
