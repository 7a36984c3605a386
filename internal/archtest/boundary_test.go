package archtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module's root, relative to this package's folder (where go test runs).
var repoRoot = filepath.Join("..", "..")

// TestImportBoundary: no package under shared/ (but shared/app and shared/push) and no function
// outside pushes depends on the AWS SDK, shared/push or shared/app; every function in pushes
// exists and does push (depends on shared/push), so the list cannot silently go stale.
func TestImportBoundary(t *testing.T) {
	g, err := load(repoRoot, "./shared/...", "./functions/...")
	if err != nil {
		t.Fatal(err)
	}
	var roots []string
	for p := range g {
		if strings.HasPrefix(p, module+"/shared/") || strings.HasPrefix(p, module+"/functions/") {
			roots = append(roots, p)
		}
	}
	slices.Sort(roots)
	if len(roots) < 20 {
		t.Fatalf("go list found %d packages under shared/ and functions/, want the whole tree: %v", len(roots), roots)
	}
	for _, v := range g.violations(roots, pushes) {
		t.Errorf("%s: only shared/app, shared/push, cmd/ and the functions that push (archtest.pushes) may", v)
	}
	isPush := func(p string) bool { return p == module+"/shared/push" }
	for _, name := range pushes {
		fn := module + "/functions/" + name
		if _, ok := g[fn]; !ok {
			t.Errorf("pushes names %s, which is not a package", fn)
		} else if g.chain(fn, isPush) == nil {
			t.Errorf("pushes names %s, which does not depend on shared/push: take it off the list", short(fn))
		}
	}
}

// TestTemplateEntryPoint: the template's main (linked into every function image, and outside
// ./... behind its build tag) imports neither shared/app nor shared/push: which of those an image
// links is its function's choice.
func TestTemplateEntryPoint(t *testing.T) {
	path := filepath.Join(repoRoot, "template", "golang-flagdown", "main.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if forbidden(p) {
			t.Errorf("template/golang-flagdown/main.go imports %s", p)
		}
		n++
	}
	if n == 0 {
		t.Fatal("template/golang-flagdown/main.go: no imports read")
	}
}

// TestViolationsFound: the check reports a bounded package that reaches a forbidden one through
// any chain, names the chain, and spares the composition root and the functions that push.
func TestViolationsFound(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	sns := "github.com/aws/aws-sdk-go-v2/service/sns"
	g := graph{
		m("shared/lifecycle"):              {m("shared/dispatch"), m("shared/app")},
		m("shared/dispatch"):               nil,
		m("shared/app"):                    {m("shared/host"), m("shared/push")},
		m("shared/push"):                   {sns},
		m("shared/host"):                   {m("shared/lifecycle")},
		m("shared/pricing"):                {m("shared/dispatch")},
		m("functions/order-create"):        {m("shared/host")},
		m("functions/notify"):              {m("shared/app")},
		m("functions/fare-estimate"):       {m("shared/pricing"), "github.com/aws/aws-sdk-go-v2/aws"},
		sns:                                nil,
		"github.com/aws/aws-sdk-go-v2/aws": nil,
	}
	var roots []string
	for p := range g {
		roots = append(roots, p)
	}
	slices.Sort(roots)
	got := g.violations(roots, []string{"notify"})
	want := []string{
		"functions/fare-estimate depends on github.com/aws/aws-sdk-go-v2/aws (functions/fare-estimate → github.com/aws/aws-sdk-go-v2/aws)",
		"functions/order-create depends on shared/app (functions/order-create → shared/host → shared/lifecycle → shared/app)",
		"shared/host depends on shared/app (shared/host → shared/lifecycle → shared/app)",
		"shared/lifecycle depends on shared/app (shared/lifecycle → shared/app)",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}

// module is the module path of flagdown.
const module = "github.com/flagdown/flagdown"

// pushes are the functions (folder names under functions/) that push to phones, and so may depend
// on shared/app, shared/push and the AWS SDK: notify (live connections and the SNS fallback),
// devices (SNS device registration), match (the offer to the driver's connections) and
// location-update (positions to the rider's connections).
var pushes = []string{"devices", "location-update", "match", "notify"}

// forbidden reports whether a package outside the composition root must not depend on path: the
// AWS SDK for Go v2, shared/push or shared/app (or a package under them).
func forbidden(path string) bool {
	for _, p := range []string{"github.com/aws/aws-sdk-go-v2", module + "/shared/push", module + "/shared/app"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// graph is an import graph: each package's direct imports, by import path.
type graph map[string][]string

// load returns the import graph of the packages patterns name and of all their dependencies, as
// `go list -deps` run in dir reports it (test imports not included: what the binaries link).
func load(dir string, patterns ...string) (graph, error) {
	args := append([]string{"list", "-deps", "-json=ImportPath,Imports"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps: %w: %s", err, stderr.String())
	}
	g := graph{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return g, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list -deps: decode: %w", err)
		}
		g[p.ImportPath] = p.Imports
	}
}

// chain returns the shortest import chain from root to the first package bad reports (root first,
// that package last), or nil when root depends on none.
func (g graph) chain(root string, bad func(string) bool) []string {
	parent := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p != root && bad(p) {
			var chain []string
			for ; p != ""; p = parent[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, q := range g[p] {
			if _, seen := parent[q]; !seen {
				parent[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}

// bounded reports whether the boundary applies to pkg: every package under shared/ but shared/app
// and shared/push, and every function under functions/ not in pushing.
func bounded(pkg string, pushing []string) bool {
	rel, ok := strings.CutPrefix(pkg, module+"/")
	if !ok {
		return false
	}
	switch {
	case rel == "shared/app" || strings.HasPrefix(rel, "shared/app/"),
		rel == "shared/push" || strings.HasPrefix(rel, "shared/push/"):
		return false
	case strings.HasPrefix(rel, "shared/"):
		return true
	case strings.HasPrefix(rel, "functions/"):
		name, _, _ := strings.Cut(strings.TrimPrefix(rel, "functions/"), "/")
		for _, p := range pushing {
			if name == p {
				return false
			}
		}
		return true
	}
	return false
}

// violations returns one line per package of roots the boundary applies to (bounded) that depends
// on a forbidden package, naming the import chain.
func (g graph) violations(roots, pushing []string) []string {
	var out []string
	for _, r := range roots {
		if !bounded(r, pushing) {
			continue
		}
		if chain := g.chain(r, forbidden); chain != nil {
			out = append(out, fmt.Sprintf("%s depends on %s (%s)", short(r), short(chain[len(chain)-1]), shortChain(chain)))
		}
	}
	return out
}

func short(p string) string { return strings.TrimPrefix(p, module+"/") }

func shortChain(chain []string) string {
	s := make([]string, len(chain))
	for i, p := range chain {
		s[i] = short(p)
	}
	return strings.Join(s, " → ")
}

// TestProductionImageCarriesNoDevTools: `flagdown` built with -tags production (the images of
// deploy/docker/Dockerfile: relay, expiry-source, migrate, cron) links none of the dev tools — the
// local platform and its functions, the replay, chaos, bench, the local WebSocket gateway, the
// browser driver — nor push and the AWS SDK. (shared/broker still links the NATS server package
// for its embedded broker; moving that behind the tag is left to do.)
func TestProductionImageCarriesNoDevTools(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-tags", "production", "./cmd/flagdown")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps -tags production ./cmd/flagdown: %v", err)
	}
	dev := []string{module + "/functions/", module + "/cmd/flagdown/internal/", "github.com/chromedp/"}
	n := 0
	for _, p := range strings.Fields(string(out)) {
		n++
		if forbidden(p) {
			t.Errorf("the production build links %s", p)
		}
		for _, d := range dev {
			if strings.HasPrefix(p, d) {
				t.Errorf("the production build links the dev tool %s", p)
			}
		}
	}
	if n < 50 {
		t.Fatalf("go list found %d packages, want the whole build", n)
	}
}
