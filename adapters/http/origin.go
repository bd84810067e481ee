package http

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gorilla/mux"
)

// Requests a web page can make. A browser lets any page send a "simple"
// cross-site request without asking the server first (no CORS preflight): a
// POST whose Content-Type is text/plain, a form encoding, or absent. Two
// rules keep such requests from driving the API:
//
//   - JSON routes take JSON only (withJSONBody, every mode): a request that
//     carries a body, or any Content-Type, must say application/json (a
//     charset parameter, if any, must be utf-8), else 415. application/json
//     is not a simple type, so a page can send it only after a preflight,
//     which the API never answers with CORS headers. A request without a
//     body and without a Content-Type (curl -X POST .../retry) is served.
//   - With authentication off there is no credential a page could lack, so
//     the server only answers requests that name it by a loopback name
//     (withLocalRequests): the Host must be localhost, 127.0.0.0/8 or [::1]
//     (with or without a port), which a page served from elsewhere cannot
//     make a browser send to it, even through DNS rebinding (a name of the
//     attacker's that resolves to 127.0.0.1 still arrives as that name); and
//     a request to a JSON route that changes something (not GET, HEAD or
//     OPTIONS) and carries an Origin must come from the same host, as the
//     dashboard's forms must (it checks them itself), so a page on another
//     origin cannot send even a bodyless POST (fetch with mode no-cors).

// loopbackHost reports whether a Host header names a loopback interface:
// localhost (any case), an address in 127.0.0.0/8, or ::1 (in brackets),
// with or without a port.
func loopbackHost(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	if strings.EqualFold(name, "localhost") {
		return true
	}
	ip := net.ParseIP(name)
	return ip != nil && ip.IsLoopback()
}

// publicPaths are the probes, served whatever the Host: they reveal
// nothing and change nothing, and orchestrators probe by address.
var publicPaths = map[string]bool{"/healthz": true, "/readyz": true}

// withLocalRequests serves, when authentication is off, only requests to a
// loopback Host (see above); others are a 403. With authentication on it
// does nothing: a page cannot supply the key.
func (s *Server) withLocalRequests(next http.Handler) http.Handler {
	if s.auth {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !publicPaths[r.URL.Path] && !loopbackHost(r.Host) {
			writeProblem(w, r, newProblem(kindHostNotAllowed, "with authentication off the server answers only requests to a loopback name "+
				"(localhost, 127.0.0.1, [::1]); turn authentication on (TASKMASTER_AUTH=on) to serve other names", nil))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// safeMethod reports whether a method only reads.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// sameOriginRequest reports whether r carries no Origin (not a browser's
// cross-origin request) or one whose host is r's Host.
func sameOriginRequest(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && u.Host == r.Host
}

// withJSONBody is router middleware (it runs after matching): on the API's
// JSON routes, a request that may carry a body (POST, PUT, PATCH, DELETE)
// must carry application/json when it has a body or any Content-Type (415
// otherwise, before the body is read), and, with authentication off, carry
// no Origin or this server's own (403 otherwise). The dashboard's forms
// (not JSON routes) check their origin themselves, with a page.
func (s *Server) withJSONBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.jsonRoutes[mux.CurrentRoute(r)] && !safeMethod(r.Method) {
			if !s.auth && !sameOriginRequest(r) {
				writeProblem(w, r, newProblem(kindCrossOrigin, "with authentication off the server refuses requests sent by a page of another origin", nil))
				return
			}
			if detail := jsonContentType(r); detail != "" {
				writeProblem(w, r, newProblem(kindMediaType, detail, nil))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// jsonContentType says what is wrong with r's Content-Type for a JSON
// route ("" when nothing).
func jsonContentType(r *http.Request) string {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if r.ContentLength == 0 {
			return "" // no body: retry, cancel, drain, heartbeat without a list
		}
		return "a request body must be JSON, sent with Content-Type: application/json"
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return "the request body must be JSON, sent with Content-Type: application/json, not " + quoteShort(ct)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return "a JSON request body must be UTF-8 (charset=utf-8, or no charset), not " + quoteShort(cs)
	}
	return ""
}

// quoteShort quotes a client's value for a problem's detail, cut to 64
// bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(strings.ToValidUTF8(s, "\uFFFD"))
}
