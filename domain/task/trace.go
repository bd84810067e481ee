package task

import (
	"fmt"
	"regexp"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Trace is the W3C trace context (https://www.w3.org/TR/trace-context/) a
// task was submitted under: the request that created it was part of that
// trace, and the task's work continues it. The service keeps it with the
// task and hands it to every holder; the zero value is no trace.
type Trace struct {
	// Parent is the traceparent: version-traceid-parentid-flags, lowercase
	// hex (00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01).
	Parent string
	// State is the tracestate (vendor-specific entries), or empty.
	State string
}

// MaxTraceStateLength is the longest tracestate kept, in bytes (the W3C
// recommendation's minimum to propagate).
const MaxTraceStateLength = 512

// traceparentPattern is a traceparent of version 00 or a later version
// (whose extra fields, after a dash, are ignored).
var traceparentPattern = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$`)

// tracestatePattern is a tracestate's characters: printable ASCII.
var tracestatePattern = regexp.MustCompile(`^[\x20-\x7e]*$`)

// ValidTraceparent reports whether s is a traceparent the service keeps: the
// W3C format, a version other than ff (version 00 without more fields),
// and a trace id and parent id that are not all zeros.
func ValidTraceparent(s string) bool {
	m := traceparentPattern.FindStringSubmatch(s)
	if m == nil || m[1] == "ff" || (m[1] == "00" && m[5] != "") {
		return false
	}
	return m[2] != "00000000000000000000000000000000" && m[3] != "0000000000000000"
}

// TraceID returns the trace id of the trace (32 hex digits), or "" for
// none.
func (tr Trace) TraceID() string {
	if len(tr.Parent) < 35 {
		return ""
	}
	return tr.Parent[3:35]
}

// CheckTrace adds to v what is wrong with tr, naming its fields with
// prefix: a traceparent that is not one, a tracestate without a
// traceparent, too long, or not printable ASCII.
func CheckTrace(v *validation.Errors, prefix string, tr Trace) {
	if tr.Parent != "" && !ValidTraceparent(tr.Parent) {
		v.Add(prefix+"traceparent", "must be a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase, ids not all zeros)")
	}
	if tr.State != "" {
		switch {
		case tr.Parent == "":
			v.Add(prefix+"tracestate", "needs a traceparent")
		case len(tr.State) > MaxTraceStateLength || !tracestatePattern.MatchString(tr.State):
			v.Add(prefix+"tracestate", fmt.Sprintf("must be at most %d bytes of printable ASCII", MaxTraceStateLength))
		}
	}
}
