package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The dependency rule of CONVENTIONS.md, checked with `go list -deps`:
// adapters -> application -> ports -> domain, never the other way.

// layerRule says which packages a layer may not depend on, directly or
// through any chain of imports.
type layerRule struct {
	// name of the layer, for messages.
	name string
	// pattern given to go list, relative to the module root.
	pattern string
	// forbidden reports why a dependency is not allowed, or "" when it is.
	forbidden func(dep string) string
}

func layerRules(module string) []layerRule {
	return []layerRule{
		{
			name:    "domain",
			pattern: "./domain/...",
			forbidden: func(dep string) string {
				if isStdlib(dep) || under(dep, "github.com/google/uuid") || under(dep, module+"/domain") {
					return ""
				}
				return "domain may import only the standard library, github.com/google/uuid and " + module + "/domain/..."
			},
		},
		{
			name:    "application",
			pattern: "./application/...",
			forbidden: forbidPrefixes("application must not depend on",
				module+"/adapters", module+"/cmd",
				"github.com/lib/pq", "github.com/jmoiron/sqlx", "github.com/gorilla/mux",
				"go.uber.org/fx", "github.com/ThreeDotsLabs"),
		},
		{
			name:    "ports",
			pattern: "./ports/...",
			forbidden: forbidPrefixes("ports must not depend on",
				module+"/adapters", module+"/cmd", module+"/application"),
		},
	}
}

func TestArchitecture(t *testing.T) {
	t.Parallel()
	root, module := moduleRoot(t)
	openSources(t, root)
	rules := layerRules(module)
	require.Len(t, rules, 3)
	for _, rule := range rules {
		t.Run(rule.name, func(t *testing.T) {
			t.Parallel()
			graph, roots, stderr := listDeps(t, root, module, rule.pattern)
			if len(roots) == 0 {
				t.Skipf("layer %s has no packages yet (%s): %s", rule.name, rule.pattern, strings.TrimSpace(stderr))
			}
			for _, r := range roots {
				require.Contains(t, graph, r, "go list -deps must list the root package itself")
			}
			for _, v := range findViolations(graph, roots, rule.forbidden) {
				t.Errorf("%s package %s depends on %s (%s)\n\timport chain: %s",
					rule.name, v.root, v.dep, v.why, strings.Join(v.chain, " -> "))
			}
		})
	}
}

// TestArchitectureViolationReport checks the checker: it must find a
// forbidden package however deep, name the shortest import chain, and let
// allowed packages through.
func TestArchitectureViolationReport(t *testing.T) {
	t.Parallel()
	const m = "example.com/m"
	rules := map[string]layerRule{}
	for _, r := range layerRules(m) {
		rules[r.name] = r
	}
	cases := []struct {
		name  string
		layer string
		graph map[string][]string
		roots []string
		want  []violation // why is not compared
	}{
		{
			name:  "clean application",
			layer: "application",
			graph: map[string][]string{
				m + "/application": {"context", m + "/ports", m + "/domain/task"},
				m + "/ports":       {"context", m + "/domain/task"},
				m + "/domain/task": {"time", "github.com/google/uuid"},
			},
			roots: []string{m + "/application"},
		},
		{
			name:  "adapter reached through an internal package",
			layer: "application",
			graph: map[string][]string{
				m + "/application":          {"context", m + "/application/internal"},
				m + "/application/internal": {m + "/adapters/postgres"},
				m + "/adapters/postgres":    {"github.com/lib/pq"},
			},
			roots: []string{m + "/application"},
			want: []violation{{
				root: m + "/application", dep: m + "/adapters/postgres",
				chain: []string{m + "/application", m + "/application/internal", m + "/adapters/postgres"},
			}},
		},
		{
			name:  "shortest chain is reported",
			layer: "application",
			graph: map[string][]string{
				m + "/application":   {m + "/application/a", "go.uber.org/fx"},
				m + "/application/a": {"go.uber.org/fx"},
			},
			roots: []string{m + "/application"},
			want: []violation{{
				root: m + "/application", dep: "go.uber.org/fx",
				chain: []string{m + "/application", "go.uber.org/fx"},
			}},
		},
		{
			name:  "watermill subpackage",
			layer: "application",
			graph: map[string][]string{
				m + "/application": {"github.com/ThreeDotsLabs/watermill/message"},
			},
			roots: []string{m + "/application"},
			want: []violation{{
				root: m + "/application", dep: "github.com/ThreeDotsLabs/watermill/message",
				chain: []string{m + "/application", "github.com/ThreeDotsLabs/watermill/message"},
			}},
		},
		{
			name:  "domain importing third-party code, a look-alike of uuid and another layer",
			layer: "domain",
			graph: map[string][]string{
				m + "/domain/task":   {"encoding/json", "github.com/google/uuid", m + "/domain/event", "golang.org/x/sys/unix"},
				m + "/domain/event":  {"time", "github.com/google/uuidx"},
				m + "/domain/worker": {m + "/domainx", m + "/ports"},
			},
			roots: []string{m + "/domain/task", m + "/domain/worker"},
			want: []violation{
				{root: m + "/domain/task", dep: "golang.org/x/sys/unix", chain: []string{m + "/domain/task", "golang.org/x/sys/unix"}},
				{root: m + "/domain/task", dep: "github.com/google/uuidx", chain: []string{m + "/domain/task", m + "/domain/event", "github.com/google/uuidx"}},
				{root: m + "/domain/worker", dep: m + "/domainx", chain: []string{m + "/domain/worker", m + "/domainx"}},
				{root: m + "/domain/worker", dep: m + "/ports", chain: []string{m + "/domain/worker", m + "/ports"}},
			},
		},
		{
			name:  "ports importing the application",
			layer: "ports",
			graph: map[string][]string{
				m + "/ports":       {m + "/domain/task", m + "/application"},
				m + "/application": {m + "/adapters/http"},
			},
			roots: []string{m + "/ports"},
			want: []violation{{
				root: m + "/ports", dep: m + "/application",
				chain: []string{m + "/ports", m + "/application"},
			}},
		},
		{
			name:  "ports may use packages whose names start like a layer",
			layer: "ports",
			graph: map[string][]string{
				m + "/ports": {m + "/applicationx", m + "/domain/task"},
			},
			roots: []string{m + "/ports"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := findViolations(c.graph, c.roots, rules[c.layer].forbidden)
			for i := range got {
				require.NotEmpty(t, got[i].why)
				got[i].why = ""
			}
			require.ElementsMatch(t, c.want, got)
		})
	}
}

func TestArchitectureIsStdlib(t *testing.T) {
	t.Parallel()
	cases := []struct {
		path string
		want bool
	}{
		{"fmt", true},
		{"encoding/json", true},
		{"vendor/golang.org/x/net/http2/hpack", true},
		{"internal/cpu", true},
		{"github.com/google/uuid", false},
		{"go.uber.org/fx", false},
		{"example.com/m/domain", false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, isStdlib(c.path), c.path)
	}
}

// violation is one forbidden dependency of a root package.
type violation struct {
	root  string
	dep   string
	why   string
	chain []string // root -> ... -> dep, shortest
}

// findViolations walks the import graph breadth-first from each root and
// reports every forbidden package reached through allowed ones, with the
// shortest chain that reaches it. It does not walk on from a forbidden
// package: its own imports are its business.
func findViolations(graph map[string][]string, roots []string, forbidden func(string) string) []violation {
	var out []violation
	for _, root := range roots {
		parent := map[string]string{root: ""}
		queue := []string{root}
		for len(queue) > 0 {
			pkg := queue[0]
			queue = queue[1:]
			if why := forbidden(pkg); why != "" {
				out = append(out, violation{root: root, dep: pkg, why: why, chain: chainTo(parent, pkg)})
				continue
			}
			for _, imp := range graph[pkg] {
				if _, seen := parent[imp]; seen {
					continue
				}
				parent[imp] = pkg
				queue = append(queue, imp)
			}
		}
	}
	return out
}

func chainTo(parent map[string]string, pkg string) []string {
	var chain []string
	for p := pkg; p != ""; p = parent[p] {
		chain = append(chain, p)
	}
	slices.Reverse(chain)
	return chain
}

// listedPackage is the part of `go list -json` output the test reads.
type listedPackage struct {
	ImportPath string
	DepOnly    bool
	Imports    []string
	Error      *struct{ Err string }
}

// listDeps runs `go list -e -deps` on pattern from the module root and
// returns the import graph of every package reached, the packages of the
// module that pattern matched, and go list's standard error. -e keeps a
// half-written package elsewhere in the tree from hiding the imports of the
// others; errors are logged.
func listDeps(t *testing.T, root, module, pattern string) (graph map[string][]string, roots []string, stderr string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-json=ImportPath,DepOnly,Imports,Error", pattern)
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pattern, err, errb.String())
	}
	graph = map[string][]string{}
	dec := json.NewDecoder(bufio.NewReader(&out))
	for {
		var p listedPackage
		err := dec.Decode(&p)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "decode go list output for %s", pattern)
		graph[p.ImportPath] = p.Imports
		if p.Error != nil {
			t.Logf("go list reports for %s: %s", p.ImportPath, p.Error.Err)
		}
		// A pattern naming a missing directory comes back as a pseudo-package
		// named after the pattern: not a package of the module.
		if !p.DepOnly && under(p.ImportPath, module) {
			roots = append(roots, p.ImportPath)
		}
	}
	return graph, roots, errb.String()
}

// openSources opens every directory and Go file of the module. go list reads
// them in a child process, which go test's result cache does not see; opening
// them here makes the cache notice an edited import or a new package, so a
// cached PASS is never stale.
func openSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		return f.Close()
	})
	require.NoError(t, err)
}

// moduleRoot walks up from the working directory to go.mod and returns its
// directory and module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			module = modulePath(data)
			require.NotEmpty(t, module, "no module line in %s", filepath.Join(dir, "go.mod"))
			return dir, module
		}
		require.ErrorIs(t, err, os.ErrNotExist)
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's working directory")
		dir = parent
	}
}

func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "module" {
			if p, err := strconv.Unquote(fields[1]); err == nil {
				return p
			}
			return fields[1]
		}
	}
	return ""
}

// isStdlib reports whether path is a standard library package: its first
// element has no dot.
func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// under reports whether path is prefix or a package below it.
func under(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

func forbidPrefixes(what string, prefixes ...string) func(string) string {
	return func(dep string) string {
		for _, p := range prefixes {
			if under(dep, p) {
				return fmt.Sprintf("%s %s/...", what, p)
			}
		}
		return ""
	}
}
