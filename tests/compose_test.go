package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// No Docker engine exists here, so the stack is checked by reading it: the
// compose file, the Dockerfile, the Prometheus config, Grafana's
// provisioning and the dashboard must agree with each other, and every
// metric a panel queries must be one the server exposes.

type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command     yaml.Node         `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		DependsOn   yaml.Node         `yaml:"depends_on"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Volumes []string `yaml:"volumes"`
		Ports   []string `yaml:"ports"`
	} `yaml:"services"`
}

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Datasource json.RawMessage `json:"datasource"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows
}

// query is one PromQL expression and where it is used.
type query struct{ where, expr string }

func loadStack(t *testing.T) (root string, compose composeFile, dash dashboard) {
	t.Helper()
	root, _ = moduleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &compose), "docker-compose.yml")
	raw, err = os.ReadFile(filepath.Join(root, "deploy", "grafana", "dashboards", "taskmaster-overview.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &dash), "dashboard JSON")
	return root, compose, dash
}

func (d dashboard) queries() []query {
	var out []query
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{where: "panel " + p.Title, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		out = append(out, query{where: "variable " + v.Name, expr: v.Definition})
	}
	return out
}

// mountSource returns the host path a service mounts at target.
func mountSource(volumes []string, target string) string {
	for _, v := range volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

func TestComposeStackIsConsistent(t *testing.T) {
	t.Parallel()
	root, compose, dash := loadStack(t)
	svc := compose.Services

	// PostgreSQL 15 with a healthcheck; Taskmaster built here, waiting for it.
	require.Contains(t, svc, "postgres")
	require.True(t, strings.HasPrefix(svc["postgres"].Image, "postgres:15"), svc["postgres"].Image)
	require.NotNil(t, svc["postgres"].Healthcheck)
	require.Contains(t, strings.Join(svc["postgres"].Healthcheck.Test, " "), "pg_isready")
	tm := svc["taskmaster"]
	require.Equal(t, ".", tm.Build.Context)
	require.FileExists(t, filepath.Join(root, tm.Build.Dockerfile))
	var deps map[string]struct {
		Condition string `yaml:"condition"`
	}
	require.NoError(t, tm.DependsOn.Decode(&deps), "taskmaster depends_on must be the long form with a condition")
	require.Equal(t, "service_healthy", deps["postgres"].Condition)
	require.Regexp(t, `^postgres://[^@]+@postgres:5432/`, tm.Environment["TASKMASTER_DATABASE_URL"])
	require.Equal(t, "0.0.0.0:8080", tm.Environment["TASKMASTER_HTTP_ADDR"])
	require.Contains(t, tm.Ports, "8080:8080")
	require.Equal(t, "on", tm.Environment["TASKMASTER_AUTH"], "the published API needs keys")
	_, metricsPort, err := net.SplitHostPort(tm.Environment["TASKMASTER_METRICS_ADDR"])
	require.NoError(t, err, "Prometheus scrapes the metrics listener, which needs no key")
	for _, published := range tm.Ports {
		require.NotContains(t, published, metricsPort, "the metrics listener stays on the stack's network")
	}

	// The first admin key is made at first start, once, into a volume.
	ak := svc["admin-key"]
	require.Equal(t, ".", ak.Build.Context)
	var akCommand []string
	require.NoError(t, ak.Command.Decode(&akCommand))
	script := strings.Join(akCommand, " ")
	require.Contains(t, script, "taskmaster keys create")
	require.Contains(t, script, "--scope admin")
	out := regexp.MustCompile(`--out (\S+)`).FindStringSubmatch(script)
	require.NotNil(t, out, "the key goes to a file, not to the logs")
	require.NotEmpty(t, mountSource(ak.Volumes, filepath.Dir(out[1])), "the key file is on a volume")
	require.Contains(t, script, "echo", "it says where the key is")
	require.Equal(t, tm.Environment["TASKMASTER_DATABASE_URL"], ak.Environment["TASKMASTER_DATABASE_URL"])
	require.NoError(t, tm.DependsOn.Decode(&deps))
	require.Equal(t, "service_completed_successfully", deps["admin-key"].Condition)

	// The Dockerfile: multi-stage, static, unprivileged, serving on 0.0.0.0.
	dockerfile, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	require.NoError(t, err)
	df := string(dockerfile)
	require.GreaterOrEqual(t, strings.Count(df, "\nFROM "), 2, "multi-stage build")
	require.Contains(t, df, "CGO_ENABLED=0")
	require.Contains(t, df, "ENV TASKMASTER_HTTP_ADDR=0.0.0.0:8080")
	require.Contains(t, df, "chown 10001:10001 /var/lib/taskmaster", "a volume at the key's directory is the runtime user's")
	require.Contains(t, df, `CMD ["serve"]`)
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(df, -1)
	require.NotEmpty(t, user, "the runtime stage must set USER")
	last := strings.Split(user[len(user)-1][1], ":")[0]
	require.NotContains(t, []string{"root", "0"}, last, "the runtime user must not be root")

	// Prometheus scrapes the taskmaster service's /metrics.
	promPath := mountSource(svc["prometheus"].Volumes, "/etc/prometheus/prometheus.yml")
	require.NotEmpty(t, promPath, "prometheus must mount its config")
	raw, err := os.ReadFile(filepath.Join(root, promPath))
	require.NoError(t, err)
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prom))
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, "taskmaster:"+metricsPort) && (sc.MetricsPath == "" || sc.MetricsPath == "/metrics") {
				scraped = true
			}
		}
	}
	require.True(t, scraped, "prometheus must scrape taskmaster:%s/metrics (TASKMASTER_METRICS_ADDR)", metricsPort)

	// Grafana: the provisioned datasource is the one the dashboard uses, and
	// the dashboard provider reads the directory compose mounts.
	gf := svc["grafana"]
	require.Regexp(t, `^\$\{GRAFANA_ADMIN_PASSWORD(:\?[^}]*)?\}$`, gf.Environment["GF_SECURITY_ADMIN_PASSWORD"],
		"Grafana's admin password comes from the environment, never admin/admin")
	for _, name := range []string{"grafana", "prometheus"} {
		for _, published := range svc[name].Ports {
			require.True(t, strings.HasPrefix(published, "127.0.0.1:"), "%s listens on this host only: %s", name, published)
		}
	}
	provisioning := mountSource(gf.Volumes, "/etc/grafana/provisioning")
	require.NotEmpty(t, provisioning)
	raw, err = os.ReadFile(filepath.Join(root, provisioning, "datasources", "prometheus.yml"))
	require.NoError(t, err)
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &ds))
	require.Len(t, ds.Datasources, 1)
	require.Equal(t, "prometheus", ds.Datasources[0].Type)
	require.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL)
	raw, err = os.ReadFile(filepath.Join(root, provisioning, "dashboards", "taskmaster.yml"))
	require.NoError(t, err)
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &providers))
	require.Len(t, providers.Providers, 1)
	dashDir := mountSource(gf.Volumes, providers.Providers[0].Options.Path)
	require.NotEmpty(t, dashDir, "grafana must mount the dashboards at the provider's path")
	require.FileExists(t, filepath.Join(root, dashDir, "taskmaster-overview.json"))

	require.Equal(t, "Taskmaster Overview", dash.Title)
	var titles []string
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				titles = append(titles, p.Title)
				require.NotNil(t, p.Datasource, "panel %q", p.Title)
				require.Equal(t, ds.Datasources[0].UID, p.Datasource.UID, "panel %q must use the provisioned datasource", p.Title)
				require.NotEmpty(t, p.Targets, "panel %q", p.Title)
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for _, want := range []string{"Task throughput by queue", "Dead letters by reason", "Worker events",
		"Queue wait", "Execution", "End to end", "Queue depth", "Outbox lag"} {
		require.True(t, slices.ContainsFunc(titles, func(s string) bool { return strings.HasPrefix(s, want) }), "no panel %q in %v", want, titles)
	}
	for _, q := range dash.queries() {
		if strings.Contains(q.expr, "histogram_quantile") {
			require.Regexp(t, `histogram_quantile\(0\.\d+, sum by \(le\) \(rate\(taskmaster_\w+_seconds_bucket`, q.expr, q.where)
		}
		require.Empty(t, sumsAcrossInstances(q.expr), "%s: every instance serves the same projected values; "+
			"take the max per label set (max by (queue) ...) before adding series up, or each event counts once per instance", q.where)
	}
}

var (
	// sumRef is a sum applied straight to a metric (or its rate).
	sumRef = regexp.MustCompile(`\bsum\s*(?:by\s*\([^)]*\)\s*)?\(\s*(?:(?:rate|irate|increase)\s*\(\s*)?(taskmaster_\w+)`)
	// projectedRef names the series every instance serves alike: the
	// lifecycle counters and histograms projected from the outbox and the
	// gauges read from the statistics tables (adapters/metrics). A
	// histogram's buckets are not listed: histogram_quantile over
	// sum by (le) scales every bucket alike and gives the same quantiles.
	projectedRef = regexp.MustCompile(`^taskmaster_(?:(?:tasks|workers)(?:_\w+_total)?|task_\w+_seconds_(?:sum|count)|outbox_lag_seconds)$`)
)

// sumsAcrossInstances returns the projected metrics expr sums directly,
// which with several instances scraped counts each event once per instance.
func sumsAcrossInstances(expr string) []string {
	var out []string
	for _, m := range sumRef.FindAllStringSubmatch(expr, -1) {
		if projectedRef.MatchString(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

var (
	metricRef   = regexp.MustCompile(`\btaskmaster_[A-Za-z0-9_]+`)
	selectorRef = regexp.MustCompile(`(taskmaster_[A-Za-z0-9_]+)\s*\{([^}]*)\}`)
	matcherRef  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
	byRef       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	labelValues = regexp.MustCompile(`label_values\(\s*(taskmaster_[A-Za-z0-9_]+)\s*,\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)`)
	literalAlts = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)
)

// series maps each sample name to its label names and their values.
type series map[string]map[string]map[string]bool

// parseExposition reads the Prometheus text format.
func parseExposition(t *testing.T, r io.Reader) series {
	t.Helper()
	out := series{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name := line[:end]
		if out[name] == nil {
			out[name] = map[string]map[string]bool{}
		}
		if line[end] != '{' {
			continue
		}
		rest := line[end+1:]
		for len(rest) > 0 && rest[0] != '}' {
			eq := strings.IndexByte(rest, '=')
			require.Positive(t, eq, "malformed line %q", line)
			label := strings.TrimSpace(strings.TrimPrefix(rest[:eq], ","))
			rest = rest[eq+1:]
			require.True(t, strings.HasPrefix(rest, `"`), "malformed line %q", line)
			var value strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				value.WriteByte(rest[i])
			}
			rest = strings.TrimPrefix(rest[i+1:], ",")
			if out[name][label] == nil {
				out[name][label] = map[string]bool{}
			}
			out[name][label][value.String()] = true
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// dashboardProblems lists every way the dashboard's queries do not match
// the scraped series: unknown metrics, labels, and label values.
func dashboardProblems(queries []query, s series) []string {
	var problems []string
	for _, q := range queries {
		refs := map[string]bool{}
		for _, name := range metricRef.FindAllString(q.expr, -1) {
			refs[name] = true
			if s[name] == nil {
				problems = append(problems, fmt.Sprintf("%s: metric %s is not exposed by /metrics", q.where, name))
			}
		}
		for _, m := range selectorRef.FindAllStringSubmatch(q.expr, -1) {
			name := m[1]
			if s[name] == nil {
				continue
			}
			for _, mm := range matcherRef.FindAllStringSubmatch(m[2], -1) {
				label, op, value := mm[1], mm[2], mm[3]
				values := s[name][label]
				if values == nil {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %q", q.where, name, label))
					continue
				}
				if strings.HasPrefix(value, "$") {
					continue // a dashboard variable
				}
				if op == "=" || (op == "=~" && literalAlts.MatchString(value)) {
					for _, v := range strings.Split(value, "|") {
						if !values[v] {
							problems = append(problems, fmt.Sprintf("%s: %s{%s} never has the value %q (seen %v)", q.where, name, label, v, keys(values)))
						}
					}
				}
			}
		}
		for _, m := range byRef.FindAllStringSubmatch(q.expr, -1) {
			for _, label := range strings.Split(m[1], ",") {
				label = strings.TrimSpace(label)
				found, anyExposed := false, false
				for name := range refs {
					anyExposed = anyExposed || s[name] != nil
					found = found || s[name][label] != nil
				}
				if anyExposed && !found { // a missing metric is reported above
					problems = append(problems, fmt.Sprintf("%s: no metric in %q has the label %q it aggregates by", q.where, q.expr, label))
				}
			}
		}
		for _, m := range labelValues.FindAllStringSubmatch(q.expr, -1) {
			if s[m[1]] != nil && s[m[1]][m[2]] == nil {
				problems = append(problems, fmt.Sprintf("%s: %s has no label %q", q.where, m[1], m[2]))
			}
		}
	}
	slices.Sort(problems)
	return slices.Compact(problems)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The checker itself: it must catch what it is there to catch.
func TestDashboardCheckerFindsMismatches(t *testing.T) {
	t.Parallel()
	s := parseExposition(t, strings.NewReader(`# HELP taskmaster_tasks Tasks by queue and status.
# TYPE taskmaster_tasks gauge
taskmaster_tasks{queue="a",status="PENDING"} 3
taskmaster_tasks{queue="b \"quoted\", yes",status="RUNNING"} 1
taskmaster_task_queue_wait_seconds_bucket{queue="a",le="0.5"} 2
taskmaster_workers_died_total 0
`))
	require.True(t, s["taskmaster_tasks"]["queue"][`b "quoted", yes`])
	require.Empty(t, dashboardProblems([]query{
		{"ok", `sum by (queue, status) (taskmaster_tasks{queue=~"$queue", status=~"PENDING|RUNNING"})`},
		{"ok", `histogram_quantile(0.5, sum by (le) (rate(taskmaster_task_queue_wait_seconds_bucket[5m])))`},
		{"ok", `rate(taskmaster_workers_died_total[5m])`},
	}, s))
	require.Equal(t, []string{"taskmaster_tasks", "taskmaster_tasks_submitted_total", "taskmaster_task_queue_wait_seconds_count"}, slices.Concat(
		sumsAcrossInstances(`sum(taskmaster_tasks{status="PENDING"})`),
		sumsAcrossInstances(`sum by (queue) (rate(taskmaster_tasks_submitted_total[5m]))`),
		sumsAcrossInstances(`sum(increase(taskmaster_task_queue_wait_seconds_count[1h]))`),
		sumsAcrossInstances(`sum(max by (queue) (taskmaster_tasks))`),
		sumsAcrossInstances(`histogram_quantile(0.5, sum by (le) (rate(taskmaster_task_queue_wait_seconds_bucket[5m])))`),
		sumsAcrossInstances(`sum by (route) (rate(taskmaster_http_request_duration_seconds_count[5m]))`), // per process
	))
	require.Len(t, dashboardProblems([]query{
		{"missing", `rate(taskmaster_tasks_submitted_total[5m])`},
		{"label", `taskmaster_tasks{state="PENDING"}`},
		{"value", `taskmaster_tasks{status="pending"}`},
		{"by", `sum by (reason) (taskmaster_tasks)`},
	}, s), 4)
}

// The dashboard against the series issue 4 specifies (names, labels, and
// the API's status spellings), without a server; the test below checks the
// same queries against what the real server exposes.
func TestDashboardMatchesSpecifiedMetrics(t *testing.T) {
	t.Parallel()
	_, _, dash := loadStack(t)
	var text strings.Builder
	for _, line := range []string{
		`taskmaster_tasks_submitted_total{queue="q"}`, `taskmaster_tasks_claimed_total{queue="q"}`,
		`taskmaster_tasks_completed_total{queue="q"}`, `taskmaster_tasks_failed_total{queue="q"}`,
		`taskmaster_tasks_dead_lettered_total{queue="q",reason="exhausted"}`,
		`taskmaster_tasks_requeued_total{queue="q",reason="failed"}`,
		`taskmaster_workers_registered_total{queue="q"}`, `taskmaster_workers_died_total`, `taskmaster_workers_cleaned_total`,
		`taskmaster_task_queue_wait_seconds_bucket{queue="q",le="+Inf"}`,
		`taskmaster_task_execution_duration_seconds_bucket{queue="q",le="+Inf"}`,
		`taskmaster_task_end_to_end_duration_seconds_bucket{queue="q",le="+Inf"}`,
		`taskmaster_tasks{queue="q",status="PENDING"}`, `taskmaster_tasks{queue="q",status="RUNNING"}`,
		`taskmaster_workers{status="ACTIVE"}`, `taskmaster_outbox_lag_seconds{consumer_group="projections"}`,
	} {
		text.WriteString(line + " 1\n")
	}
	require.Empty(t, dashboardProblems(dash.queries(), parseExposition(t, strings.NewReader(text.String()))))
}

// Every metric (with its labels and fixed label values) that a dashboard
// panel queries is exposed by the real server after a small workload.
func TestDashboardQueriesMetricsTheServerExposes(t *testing.T) {
	t.Parallel()
	_, _, dash := loadStack(t)
	s := testserver.Start(t, nil)
	scrape := func() (int, []byte) {
		resp, err := http.Get(s.URL + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, body
	}
	// A small workload touching every series the dashboard shows.
	ctx := context.Background()
	c := newSDK(t, s.URL, nil)
	_, err := c.Register(ctx, client.RegisterParams{ID: "compose-worker", Queues: []string{"compose"}})
	require.NoError(t, err)
	for range 5 {
		_, err := c.Submit(ctx, client.SubmitParams{Queue: "compose", Payload: map[string]int{"n": 1}})
		require.NoError(t, err)
	}
	claimed, err := c.Claim(ctx, client.ClaimParams{WorkerID: "compose-worker", Limit: 3})
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	report := func(i int, p client.FailParams, complete bool) {
		p.WorkerID, p.LeaseID = "compose-worker", claimed[i].LeaseID
		if complete {
			_, err = c.Complete(ctx, claimed[i].ID, client.CompleteParams{WorkerID: p.WorkerID, LeaseID: p.LeaseID, Result: "ok"})
		} else {
			_, err = c.Fail(ctx, claimed[i].ID, p)
		}
		require.NoError(t, err)
	}
	report(0, client.FailParams{}, true)
	report(1, client.FailParams{Error: "try again"}, false)
	report(2, client.FailParams{Error: "bad input", NonRetryable: true}, false)
	page, err := c.List(ctx, client.ListParams{Queue: "compose", Status: client.StatusPending, Limit: 1})
	require.NoError(t, err)
	_, err = c.Cancel(ctx, page.Tasks[0].ID)
	require.NoError(t, err)
	// One more claimed and left RUNNING, so queue depth shows both statuses.
	_, err = c.Claim(ctx, client.ClaimParams{WorkerID: "compose-worker", Limit: 1})
	require.NoError(t, err)

	// The projections are asynchronous: poll until the series appear.
	var problems []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := scrape()
		require.Equal(t, http.StatusOK, status, "GET /metrics: %s", body)
		problems = dashboardProblems(dash.queries(), parseExposition(t, strings.NewReader(string(body))))
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling the scrape, with a deadline
	}
	require.Empty(t, problems, "the dashboard queries series the server does not expose:\n%s", strings.Join(problems, "\n"))
}
