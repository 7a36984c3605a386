package deploycheck_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/internal/deploycheck"
)

// deployTrees are the kustomizations `kubectl apply -k` applies.
var deployTrees = []string{"deploy/knative", "deploy/openfaas"}

// render builds dir (relative to root) with the kustomize library, failing the test on an error.
func render(t *testing.T, root, dir string) []deploycheck.Manifest {
	t.Helper()
	ms, err := deploycheck.Render(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func ids(ms []deploycheck.Manifest) []string {
	var out []string
	for _, m := range ms {
		out = append(out, deploycheck.Str(m.Object, "apiVersion")+" "+m.Kind()+" "+m.Name())
	}
	slices.Sort(out)
	return out
}

// TestKustomizeRenders: kustomize builds every tree, and its output is exactly the objects of the
// files the kustomization lists (the ones the consistency tests read), in the Knative namespace.
func TestKustomizeRenders(t *testing.T) {
	r := load(t)
	for dir, raw := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
		got := render(t, r.root, dir)
		var listed []deploycheck.Manifest
		for _, m := range raw {
			if filepath.Base(m.File) != "migrate-job.yaml" { // applied on its own, before a release
				listed = append(listed, m)
			}
		}
		if g, w := ids(got), ids(listed); !slices.Equal(g, w) {
			t.Errorf("%s: kustomize renders\n%v\nwant the listed files' objects\n%v", dir, g, w)
		}
		for _, m := range got {
			ns := deploycheck.Str(m.Object, "metadata", "namespace")
			if dir == "deploy/knative" && ns != "flagdown" {
				t.Errorf("%s: %s %s in namespace %q; want flagdown", dir, m.Kind(), m.Name(), ns)
			}
		}
	}
}

// TestManifestsDecodeStrictly: every rendered Knative Service decodes strictly into Knative
// Serving's own type and passes its admission validation; every ConfigMap, Deployment, Job and
// CronJob (the migrate Jobs too) decodes strictly into Kubernetes' own types.
func TestManifestsDecodeStrictly(t *testing.T) {
	r := load(t)
	ctx := context.Background()
	services := 0
	for _, dir := range deployTrees {
		ms := render(t, r.root, dir)
		job, err := deploycheck.LoadManifests(r.root, []string{dir + "/migrate-job.yaml"})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(ms, job...) {
			obj, ok, err := deploycheck.Typed(m)
			if err != nil {
				t.Error(err)
				continue
			}
			if !ok {
				if m.Kind() == "Service" || m.Kind() == "Deployment" || m.Kind() == "ConfigMap" || strings.HasSuffix(m.Kind(), "Job") {
					t.Errorf("%s: %s %s (%s) was not decoded into a Go type", dir, m.Kind(), m.Name(), deploycheck.Str(m.Object, "apiVersion"))
				}
				continue
			}
			if m.Kind() == "Service" {
				services++
				s, err := deploycheck.KnativeService(m)
				if err != nil {
					t.Fatalf("Typed decoded %T but KnativeService: %v", obj, err)
				}
				warnings, err := deploycheck.ValidateKnativeService(ctx, s)
				if err != nil {
					t.Errorf("%s: %v", dir, err)
				}
				if warnings != nil {
					t.Errorf("%s: %v", dir, warnings)
				}
			}
		}
	}
	if want := len(r.functions) + 1; services != want { // one per function, and the dead-letter sink
		t.Errorf("%d Knative Services checked; want %d (one per function and flagdown-dead-letters)", services, want)
	}
}

// copyTree copies the files of dir (relative to root, not recursive) into a new temporary folder.
func copyTree(t *testing.T, root, dir string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(dir))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// edit replaces the first old in dir/file with new, failing when old is not there.
func edit(t *testing.T, dir, file, old, new string) {
	t.Helper()
	p := filepath.Join(dir, file)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s has no %q", file, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkTree renders dir and returns the first error of strict decoding or validation.
func checkTree(t *testing.T, dir string) error {
	t.Helper()
	ms, err := deploycheck.Render(dir)
	if err != nil {
		return err
	}
	for _, m := range ms {
		_, ok, err := deploycheck.Typed(m)
		if err != nil {
			return err
		}
		if ok && m.Kind() == "Service" {
			s, err := deploycheck.KnativeService(m)
			if err != nil {
				return err
			}
			warnings, err := deploycheck.ValidateKnativeService(context.Background(), s)
			if err != nil {
				return err
			}
			if warnings != nil {
				return warnings
			}
		}
	}
	return nil
}

// TestMisspelledFieldFails renders temporary copies of the trees with one mistake each: every one
// must fail the check, naming what is wrong; the unchanged copy passes.
func TestMisspelledFieldFails(t *testing.T) {
	root := repoRoot(t)
	cases := []struct {
		name, dir, file, old, new, want string
	}{
		{"UnchangedPasses", "deploy/knative", "services.yaml", "", "", ""},
		{"KnativeServiceSpecField", "deploy/knative", "services.yaml", "timeoutSeconds: 10", "timeoutSecond: 10", `unknown field "timeoutSecond"`},
		{"KnativeContainerField", "deploy/knative", "services.yaml", "readinessProbe:", "readynessProbe:", `unknown field "readynessProbe"`},
		{"KnativeWrongType", "deploy/knative", "services.yaml", "containerPort: 8080", "containerPort: eighty", "containerPort"},
		{"KnativeInvalidValue", "deploy/knative", "services.yaml", "timeoutSeconds: 10", "timeoutSeconds: 100000", "timeoutSeconds"},
		{"KnativeInsecureContainer", "deploy/knative", "services.yaml", "            runAsNonRoot: true\n", "", "runAsNonRoot"},
		{"DeploymentField", "deploy/openfaas", "relay.yaml", "replicas:", "replica:", `unknown field "replica"`},
		{"CronJobField", "deploy/knative", "reconcile-cron.yaml", "  schedule:", "  schedul:", `unknown field "schedul"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyTree(t, root, c.dir)
			if c.old != "" {
				edit(t, dir, c.file, c.old, c.new)
			}
			err := checkTree(t, dir)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unchanged copy of %s: %v", c.dir, err)
			case c.want != "" && err == nil:
				t.Fatalf("%s with %q → %q passed; want an error naming %s", c.file, c.old, c.new, c.want)
			case c.want != "" && !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %q does not name %s", err, c.want)
			}
		})
	}
}
