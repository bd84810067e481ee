package tests

import (
	"bufio"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
)

// haService is one service of deploy/ha/compose.yaml.
type haService struct {
	Image string `yaml:"image"`
	Build struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
}

// iniFile reads a PgBouncer configuration: section → key → value.
func iniFile(t *testing.T, path string) map[string]map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, ";") || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
			out[section] = map[string]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			require.True(t, ok, "%s: %q", path, line)
			out[section][strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// hostPorts returns a connection string's hosts as host:port, and its
// target_session_attrs and user.
func hostPorts(t *testing.T, s string) (hosts []string, target, user string) {
	t.Helper()
	p, err := postgres.ParseConnString(s)
	require.NoError(t, err, s)
	return p.Hosts(), p["target_session_attrs"], p["user"]
}

// No Docker engine exists here: the HA stack (docs/scaling.md's topology)
// is checked by reading it, and its Taskmaster configuration by loading it.
func TestHAComposeStackIsConsistent(t *testing.T) {
	t.Parallel()
	root, _ := moduleRoot(t)
	dir := filepath.Join(root, "deploy", "ha")
	raw, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	require.NoError(t, err)
	var compose struct {
		Services map[string]haService `yaml:"services"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &compose), "deploy/ha/compose.yaml")
	svc := compose.Services
	nodes := map[string]bool{}
	for _, name := range []string{"node1", "node2"} {
		cmd := strings.Join(svc[name].Command, " ")
		require.Contains(t, cmd, "pg_autoctl create postgres --hostname "+name, name)
		require.Contains(t, cmd, "--username taskmaster --dbname taskmaster", name)
		require.Contains(t, cmd, "--run", name)
		require.Contains(t, svc[name].Environment["PG_AUTOCTL_MONITOR"], "@monitor:5432/pg_auto_failover")
		nodes[name+":5432"] = true
	}
	require.Contains(t, strings.Join(svc["monitor"].Command, " "), "pg_autoctl create monitor")

	// The PostgreSQL image has the Debian packages the tests run.
	df, err := os.ReadFile(filepath.Join(dir, svc["node1"].Build.Dockerfile))
	require.NoError(t, err)
	for _, pkg := range []string{"postgresql-15 ", "postgresql-15-auto-failover", "pg-auto-failover-cli", "pgbouncer"} {
		require.Contains(t, string(df), pkg)
	}
	require.Regexp(t, `(?m)^USER postgres$`, string(df), "pg_autoctl and PgBouncer refuse root")

	// A PgBouncer next to each node, in transaction pooling, ignoring what
	// Taskmaster sends at connection start.
	bouncers := map[string]bool{}
	for i, name := range []string{"pgbouncer1", "pgbouncer2"} {
		s := svc[name]
		require.Len(t, s.Command, 2, name)
		require.Equal(t, "pgbouncer", s.Command[0])
		mount := mountSource(s.Volumes, filepath.Dir(s.Command[1]))
		require.NotEmpty(t, mount, "%s mounts its configuration", name)
		ini := iniFile(t, filepath.Join(dir, mount, filepath.Base(s.Command[1])))
		require.Equal(t, "transaction", ini["pgbouncer"]["pool_mode"])
		ignored := strings.Split(strings.ReplaceAll(ini["pgbouncer"]["ignore_startup_parameters"], " ", ""), ",")
		for _, p := range localpg.IgnoredStartupParameters {
			require.Contains(t, ignored, p, "%s: Taskmaster sends %s", name, p)
		}
		require.Regexp(t, `host=node`+string(rune('1'+i))+` port=5432 `, ini["databases"]["taskmaster"], "%s pools to its own node", name)
		users, err := os.ReadFile(filepath.Join(dir, mount, filepath.Base(ini["pgbouncer"]["auth_file"])))
		require.NoError(t, err)
		require.Contains(t, string(users), `"taskmaster"`)
		bouncers[name+":"+ini["pgbouncer"]["listen_port"]] = true
	}

	// The instances: the configuration loads, and every connection string
	// names the services it should.
	for _, name := range []string{"taskmaster1", "taskmaster2"} {
		s := svc[name]
		require.Equal(t, "../..", s.Build.Context)
		require.FileExists(t, filepath.Join(dir, s.Build.Context, s.Build.Dockerfile))
		cfg, err := app.LoadConfig("serve", nil, func(k string) string { return s.Environment[k] }, io.Discard)
		require.NoError(t, err, "%s's configuration", name)
		require.True(t, cfg.TransactionPooling)
		hosts, target, user := hostPorts(t, cfg.DatabaseURL)
		require.Len(t, hosts, 2)
		for _, h := range hosts {
			require.True(t, bouncers[h], "%s: TASKMASTER_DATABASE_URL names %s, no PgBouncer of the stack", name, h)
		}
		require.Equal(t, postgres.TargetReadWrite, target)
		require.Equal(t, "taskmaster", user)
		for env, want := range map[string]string{cfg.ListenDatabaseURL: postgres.TargetReadWrite, cfg.ReadDatabaseURL: "standby"} {
			hosts, target, user := hostPorts(t, env)
			require.Len(t, hosts, 2)
			for _, h := range hosts {
				require.True(t, nodes[h], "%s: %s names %s, no node of the stack", name, env, h)
			}
			require.Equal(t, want, target, env)
			require.Equal(t, "taskmaster", user)
		}
		require.Empty(t, s.Ports, "%s is reached through the load balancer only", name)
	}
	for name, s := range svc {
		if name != "lb" {
			require.Empty(t, s.Ports, "%s publishes nothing", name)
		}
	}

	// The load balancer sends to both instances, checking /readyz.
	require.Contains(t, svc["lb"].Ports, "8080:8080")
	hp, err := os.ReadFile(filepath.Join(dir, mountSource(svc["lb"].Volumes, "/usr/local/etc/haproxy/haproxy.cfg")))
	require.NoError(t, err)
	require.Contains(t, string(hp), "option httpchk GET /readyz")
	servers := regexp.MustCompile(`(?m)^\s*server \S+ (\S+) check`).FindAllStringSubmatch(string(hp), -1)
	var backends []string
	for _, m := range servers {
		backends = append(backends, m[1])
	}
	slices.Sort(backends)
	addr := svc["taskmaster1"].Environment["TASKMASTER_HTTP_ADDR"]
	u, err := url.Parse("http://" + addr)
	require.NoError(t, err)
	require.Equal(t, []string{"taskmaster1:" + u.Port(), "taskmaster2:" + u.Port()}, backends)

	// The admin key is made on the database directly, once the role is set.
	ak := strings.Join(svc["admin-key"].Command, " ")
	require.Contains(t, ak, "taskmaster keys create")
	hosts, _, _ := hostPorts(t, svc["admin-key"].Environment["TASKMASTER_DATABASE_URL"])
	for _, h := range hosts {
		require.True(t, nodes[h], h)
	}
	require.Contains(t, strings.Join(svc["db-settings"].Command, " "), "ALTER ROLE taskmaster SET statement_timeout")
}
