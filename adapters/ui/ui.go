// Package ui is the operations dashboard: server-rendered html/template
// pages under /ui/, with their stylesheet and a small script embedded in
// the binary (no build step, no CDN). It calls the application's driving
// ports, never the HTTP API. With authentication on, a browser logs in
// once with an API key and holds an opaque session (an HttpOnly,
// SameSite=Strict cookie); every action is a POST form that carries the
// session's CSRF token and a same-origin Origin. Keys with the read scope
// see everything and change nothing; admin keys act.
package ui

import (
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

//go:embed templates/*.html static/*
var files embed.FS

// Prefix is where the dashboard is mounted.
const Prefix = "/ui/"

// Cookie names.
const (
	sessionCookie = "tm_session"
	// csrfCookie carries the double-submit token when authentication is
	// off (no session to keep it in).
	csrfCookie = "tm_csrf"
)

// DefaultPollInterval is how often the pages' live regions refresh.
const DefaultPollInterval = 2 * time.Second

// Config configures the dashboard.
type Config struct {
	// Auth: pages need a session (a login with an API key). Off: no login,
	// every visitor acts (as the API is then open too).
	Auth bool
	// Secure marks the cookies Secure (the server speaks TLS).
	Secure bool
	// PollInterval is the live regions' refresh interval (0: the default).
	PollInterval time.Duration
}

// Deps are the driving ports the pages call.
type Deps struct {
	Tasks     ports.TaskService
	Workers   ports.WorkerService
	Queues    ports.QueueService
	Schedules ports.ScheduleService
	Sessions  ports.SessionService
	Dashboard ports.DashboardService
	// Bulk, when set, offers retry and cancel of every task matching a
	// filter.
	Bulk ports.BulkService
	// Workflows, when set, serves the run pages.
	Workflows ports.WorkflowService
	// Limits, when set, are the rate limits the dashboard shares with the
	// API (required with authentication on).
	Limits Limits
	// NamedLimits, when set, shows the named limits.
	NamedLimits ports.LimitService
	Logger      *zap.Logger
	// Reads, when set, serve the pages' reads, which may lag: a read
	// replica's services (TASKMASTER_READ_DATABASE_URL). A page shown just
	// after an action (its address carries the action's outcome) reads
	// through the services above, so that it shows the change.
	Reads *Reads
	// ReadSource, when set, says where Reads read from: every page says it.
	ReadSource ports.ReadSource
}

// Reads are the services of the pages' reads that may lag.
type Reads struct {
	Tasks     ports.TaskService
	Workers   ports.WorkerService
	Queues    ports.QueueService
	Schedules ports.ScheduleService
	Dashboard ports.DashboardService
}

// reads returns the services the page of r reads through: Deps.Reads,
// unless the page follows an action (or no replica is configured).
func (h *Handler) reads(r *http.Request) Reads {
	if h.d.Reads == nil || afterAction(r) {
		return Reads{Tasks: h.d.Tasks, Workers: h.d.Workers, Queues: h.d.Queues, Schedules: h.d.Schedules, Dashboard: h.d.Dashboard}
	}
	return *h.d.Reads
}

// Limits are the request limits the dashboard shares with the API
// (adapters/http.Limits): a page load or action of a session is charged to
// its key, as the key's API requests are, and a client address's logins
// and requests with a session cookie that names nothing are charged to the
// address.
type Limits interface {
	// Key takes a request of key; false: refused (the rate limit headers
	// and Retry-After are written).
	Key(w http.ResponseWriter, key *apikey.Key) bool
	// Client takes an attempt of r's client address; false: refused
	// (Retry-After is written).
	Client(w http.ResponseWriter, r *http.Request) bool
	// ChargeClient takes an attempt of r's client address, if one is left.
	ChargeClient(r *http.Request)
	// ClientSpent reports whether r's client address has no attempt left
	// (and then writes Retry-After).
	ClientSpent(w http.ResponseWriter, r *http.Request) bool
}

// Handler serves the dashboard.
type Handler struct {
	cfg    Config
	d      Deps
	mux    *http.ServeMux
	pages  map[string]*template.Template
	static http.Handler
	log    *zap.Logger
}

// New returns the dashboard's handler, for every path under Prefix.
func New(cfg Config, d Deps) (*Handler, error) {
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Auth && (d.Sessions == nil || d.Limits == nil) {
		return nil, errors.New("dashboard: authentication is on but no session service or limits are wired")
	}
	h := &Handler{cfg: cfg, d: d, mux: http.NewServeMux(), log: d.Logger}
	if h.log == nil {
		h.log = zap.NewNop()
	}
	var err error
	if h.pages, err = parsePages(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(files, "static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix(Prefix+"static/", http.FileServerFS(static))
	h.routes()
	return h, nil
}

// routes is the dashboard's surface at a glance. Every GET reads; every
// POST acts (admin only, CSRF-checked) except the login itself.
func (h *Handler) routes() {
	m := h.mux
	m.HandleFunc("GET /ui/static/", h.serveStatic)
	m.HandleFunc("GET /ui/login", h.loginPage)
	m.HandleFunc("POST /ui/login", h.login)
	m.Handle("POST /ui/logout", h.act(h.logout))

	m.Handle("GET /ui/{$}", h.read(h.overview))
	m.Handle("GET /ui/queues/{queue}", h.read(h.queuePage))
	m.Handle("POST /ui/queues/{queue}/tasks", h.act(h.queueTasksAction))
	m.Handle("GET /ui/tasks/{id}", h.read(h.taskPage))
	m.Handle("GET /ui/tasks/{id}/{part}", h.read(h.taskDownload))
	m.Handle("POST /ui/tasks/{id}/retry", h.act(h.retryTask))
	m.Handle("POST /ui/tasks/{id}/cancel", h.act(h.cancelTask))
	m.Handle("GET /ui/workflows/{id}", h.read(h.workflowPage))
	m.Handle("POST /ui/workflows/{id}/{action}", h.act(h.workflowAction))
	m.Handle("GET /ui/dead", h.read(h.deadPage))
	m.Handle("GET /ui/workers", h.read(h.workersPage))
	m.Handle("POST /ui/workers/{id}/drain", h.act(h.drainWorker))
	m.Handle("GET /ui/schedules", h.read(h.schedulesPage))
	m.Handle("GET /ui/limits", h.read(h.limitsPage))
	m.Handle("POST /ui/schedules/{name}/{action}", h.act(h.scheduleAction))
	h.extraRoutes(m)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, &pageError{status: http.StatusNotFound, msg: "No page has this address."})
	})
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("X-Frame-Options", "DENY")
	if err := textInput(r); err != nil {
		h.fail(w, r, err)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// textInput refuses (422) a request whose query parameters or form fields
// are not text (validation.Text: invalid UTF-8, NUL), before any page or
// action reads them: a filter of such bytes would fail in the database.
func textInput(r *http.Request) error {
	var v validation.Errors
	v.CheckValues(r.URL.Query())
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			return &pageError{status: http.StatusBadRequest, msg: "The form could not be read."}
		}
		v.CheckValues(r.PostForm)
	}
	return v.Err()
}

func (h *Handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	// Embedded files change only with the binary; the pages reference
	// them with the binary's build stamp, so a day's caching is safe.
	w.Header().Set("Cache-Control", "public, max-age=86400")
	h.static.ServeHTTP(w, r)
}

// viewer is who looks at a page: the key of the session (nil with
// authentication off) and the CSRF token of its forms.
type viewer struct {
	key   *apikey.Key
	csrf  string
	token string // the session token (for logout)
}

// CSRF is the anti-forgery token the page's forms carry.
func (v *viewer) CSRF() string { return v.csrf }

// CanAct reports whether the viewer may act (admin; everyone with
// authentication off).
func (v *viewer) CanAct() bool { return v.key.Has(apikey.ScopeAdmin) }

// Name is the key's name ("" with authentication off).
func (v *viewer) Name() string {
	if v.key == nil {
		return ""
	}
	return v.key.Snapshot().Name
}

// Role names what the viewer may do.
func (v *viewer) Role() string {
	if v.CanAct() {
		return "admin"
	}
	return "read-only"
}

type viewerKey struct{}

func viewerOf(ctx context.Context) *viewer {
	v, _ := ctx.Value(viewerKey{}).(*viewer)
	return v
}

// authenticate finds the request's viewer: its session's key, or with
// authentication off an anonymous viewer with a double-submit CSRF cookie.
// errLogin means the browser must log in.
func (h *Handler) authenticate(w http.ResponseWriter, r *http.Request) (*viewer, error) {
	if !h.cfg.Auth {
		token := ""
		if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 43 {
			token = c.Value
		} else {
			token = randomToken()
			http.SetCookie(w, h.cookie(csrfCookie, token, 0))
		}
		return &viewer{csrf: token}, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, errLogin
	}
	if !h.d.Sessions.Known(c.Value) && h.d.Limits.ClientSpent(w, r) {
		return nil, errTooManyAttempts // a session this instance has not seen costs no lookup
	}
	s, k, err := h.d.Sessions.Authenticate(r.Context(), c.Value)
	if err != nil {
		if errors.Is(err, ports.ErrUnavailable) {
			return nil, err
		}
		h.d.Limits.ChargeClient(r)
		return nil, errLogin
	}
	if !h.d.Limits.Key(w, k) {
		return nil, errKeyRateLimited
	}
	return &viewer{key: k, csrf: s.CSRF, token: c.Value}, nil
}

var (
	// errTooManyAttempts: the client address's logins and unknown
	// sessions are spent for now.
	errTooManyAttempts = &pageError{status: http.StatusTooManyRequests,
		msg: "Too many attempts from your address without a working session or key; try again in a moment."}
	// errKeyRateLimited: the session's key has spent its rate limit (its
	// API requests and dashboard pages together).
	errKeyRateLimited = &pageError{status: http.StatusTooManyRequests,
		msg: "Your API key's request rate limit is spent (its API requests count too); try again in a moment."}
)

var errLogin = errors.New("login required")

// read wraps a page: it needs a viewer (else the login page).
func (h *Handler) read(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := h.authenticate(w, r)
		if errors.Is(err, errLogin) {
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
		next(w, r.WithContext(h.withViewer(r.Context(), v)))
	})
}

// act wraps an action: a same-origin POST of a logged-in viewer carrying
// the session's CSRF token, by an admin (403 for read keys).
func (h *Handler) act(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			h.fail(w, r, &pageError{status: http.StatusForbidden, msg: "Refused: the form was not sent from this dashboard (cross-origin request)."})
			return
		}
		v, err := h.authenticate(w, r)
		if errors.Is(err, errLogin) {
			h.fail(w, r, &pageError{status: http.StatusForbidden, msg: "Refused: you are not logged in (or your session ended)."})
			return
		}
		if err != nil {
			h.fail(w, r, err)
			return
		}
		if got := r.PostFormValue("csrf"); got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(v.csrf)) != 1 {
			h.fail(w, r, &pageError{status: http.StatusForbidden, msg: "Refused: the form's anti-forgery token is missing or wrong. Reload the page and try again."})
			return
		}
		ctx := h.withViewer(r.Context(), v)
		if !v.CanAct() && r.URL.Path != "/ui/logout" {
			h.fail(w, r.WithContext(ctx), &pageError{status: http.StatusForbidden, msg: "Refused: your API key has the read scope; only admin keys can act."})
			return
		}
		next(w, r.WithContext(ctx))
	})
}

func (h *Handler) withViewer(ctx context.Context, v *viewer) context.Context {
	ctx = context.WithValue(ctx, viewerKey{}, v)
	if v.key != nil {
		ctx = ports.WithPrincipal(ctx, v.key)
	}
	return ctx
}

// sameOrigin reports whether a POST came from a page of this server: its
// Origin (or, without one, its Referer) names this host. Browsers send
// Origin on every POST; a request with neither header is not a browser's
// cross-site form and is left to the CSRF token.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true
	}
	u, err := url.Parse(src)
	if err != nil || src == "null" {
		return false
	}
	return u.Host == r.Host
}

func (h *Handler) cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		Secure: h.cfg.Secure, SameSite: http.SameSiteStrictMode}
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// loginPage shows the login form (or, with authentication off, the
// overview).
func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.Auth {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", page{Title: "Log in", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}})
}

type loginData struct {
	Next  string
	Error string
}

// login opens a session for a working key with the read or admin scope.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.cfg.Auth {
		http.Redirect(w, r, Prefix, http.StatusSeeOther)
		return
	}
	next := safeNext(r.PostFormValue("next"))
	if !sameOrigin(r) {
		h.fail(w, r, &pageError{status: http.StatusForbidden, msg: "Refused: the login form was not sent from this dashboard."})
		return
	}
	if !h.d.Limits.Client(w, r) {
		h.fail(w, r, errTooManyAttempts)
		return
	}
	token, s, _, err := h.d.Sessions.Login(r.Context(), strings.TrimSpace(r.PostFormValue("api_key")))
	if err != nil {
		if errors.Is(err, ports.ErrUnavailable) {
			h.fail(w, r, err)
			return
		}
		msg := "That API key does not work (unknown, revoked or expired)."
		var fe *apikey.ForbiddenError
		if errors.As(err, &fe) {
			msg = "That API key may not use the dashboard: it needs the read or admin scope."
		}
		h.render(w, r, http.StatusUnauthorized, "login", page{Title: "Log in", Data: loginData{Next: next, Error: msg}})
		return
	}
	maxAge := int(time.Until(s.ExpiresAt).Seconds())
	http.SetCookie(w, h.cookie(sessionCookie, token, max(maxAge, 1)))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if v := viewerOf(r.Context()); v.token != "" {
		if err := h.d.Sessions.Logout(r.Context(), v.token); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	http.SetCookie(w, h.cookie(sessionCookie, "", -1))
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// safeNext keeps a post-login destination only when it is a dashboard path.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return Prefix
	}
	return next
}

// compressed returns the writer of a page: gzip when the browser accepts
// it, and the function that finishes it.
func compressed(w http.ResponseWriter, r *http.Request) (io.Writer, func()) {
	w.Header().Add("Vary", "Accept-Encoding")
	if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		return w, func() {}
	}
	w.Header().Set("Content-Encoding", "gzip")
	zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
	return zw, func() { _ = zw.Close() }
}
