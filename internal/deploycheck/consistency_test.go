package deploycheck_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/deploycheck"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
)

// platformVars are variables the deployment platform provides to the template's entry point
// (template/golang-flagdown/main.go), documented in docs/deploy.md and docs/operations.md, not in the
// configuration table.
var platformVars = map[string]bool{"PORT": true, "read_timeout": true, "write_timeout": true, "K_SERVICE": true, "HOSTNAME": true}

// codeDirs are the folders whose Go code runs in a deployment.
var codeDirs = []string{"functions", "shared", "events", "cmd", "template"}

type repo struct {
	root      string
	stack     *deploycheck.Stack
	functions []string
	envFile   map[string]string
	knative   []deploycheck.Manifest
	openfaas  []deploycheck.Manifest
	vars      map[string][]string
	configDoc map[string]bool
}

// repoRoot is the module root: the package folder's grandparent, checked by its go.mod.
// internalPort is the port of a function process's internal listener (metrics, readiness
// details), which the scrape annotations must name: the public port 8080 serves no metrics.
var internalPort = strings.TrimPrefix(host.DefaultInternalAddr, ":")

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !strings.Contains(string(b), "module github.com/flagdown/flagdown\n") {
		t.Fatalf("%s is not the flagdown module root: %v", root, err)
	}
	return root
}

func load(t *testing.T) *repo {
	t.Helper()
	r := &repo{root: repoRoot(t)}
	var err error
	if r.stack, err = deploycheck.LoadStack(filepath.Join(r.root, "stack.yml")); err != nil {
		t.Fatal(err)
	}
	if r.functions, err = deploycheck.FunctionNames(r.root); err != nil {
		t.Fatal(err)
	}
	if r.envFile, err = deploycheck.LoadEnvFile(filepath.Join(r.root, "deploy/openfaas/env.yml")); err != nil {
		t.Fatal(err)
	}
	if r.knative, err = deploycheck.LoadManifests(r.root, kustomizeFiles(t, r.root, "deploy/knative")); err != nil {
		t.Fatal(err)
	}
	if r.openfaas, err = deploycheck.LoadManifests(r.root, kustomizeFiles(t, r.root, "deploy/openfaas")); err != nil {
		t.Fatal(err)
	}
	if r.vars, err = deploycheck.EnvVarsRead(r.root, codeDirs...); err != nil {
		t.Fatal(err)
	}
	if r.configDoc, err = deploycheck.ConfigDocVars(filepath.Join(r.root, "docs", "configuration.md")); err != nil {
		t.Fatal(err)
	}
	return r
}

// kustomizeFiles returns the resources of dir/kustomization.yaml (paths relative to the root), and
// fails the test when a YAML file in dir is neither listed nor a documented stand-alone manifest.
func kustomizeFiles(t *testing.T, root, dir string) []string {
	t.Helper()
	ms, err := deploycheck.LoadManifests(root, []string{dir + "/kustomization.yaml"})
	if err != nil || len(ms) != 1 {
		t.Fatalf("%s/kustomization.yaml: %v", dir, err)
	}
	var files []string
	listed := map[string]bool{"kustomization.yaml": true, "migrate-job.yaml": true}
	for _, r := range deploycheck.List(ms[0].Object, "resources") {
		s, _ := r.(string)
		if _, err := os.Stat(filepath.Join(root, dir, s)); err != nil {
			t.Errorf("%s/kustomization.yaml: resource %s: %v", dir, s, err)
			continue
		}
		listed[s] = true
		files = append(files, dir+"/"+s)
	}
	all, _ := filepath.Glob(filepath.Join(root, dir, "*.yaml"))
	for _, f := range all {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s/%s is not in kustomization.yaml resources", dir, filepath.Base(f))
		}
	}
	// migrate-job.yaml is applied on its own (before the release), but is checked like the rest.
	if _, err := os.Stat(filepath.Join(root, dir, "migrate-job.yaml")); err == nil {
		files = append(files, dir+"/migrate-job.yaml")
	}
	return files
}

func (r *repo) byKind(ms []deploycheck.Manifest, kind string) map[string]deploycheck.Manifest {
	out := map[string]deploycheck.Manifest{}
	for _, m := range ms {
		if m.Kind() == kind {
			out[m.Name()] = m
		}
	}
	return out
}

// imageRepo is an image reference without its tag.
func imageRepo(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i]
	}
	return ref
}

// TestStackFunctionsMatchTree: stack.yml has exactly one entry per functions/<name> folder, with
// that handler, the committed template, and an image named from REGISTRY and TAG.
func TestStackFunctionsMatchTree(t *testing.T) {
	r := load(t)
	var names []string
	for n := range r.stack.Functions {
		names = append(names, n)
	}
	sort.Strings(names)
	if !slices.Equal(names, r.functions) {
		t.Errorf("stack.yml functions %v, functions/ folders %v", names, r.functions)
	}
	if r.stack.Provider.Name != "openfaas" {
		t.Errorf("provider.name = %q", r.stack.Provider.Name)
	}
	for _, n := range names {
		fn := r.stack.Functions[n]
		if fn.Handler != "./functions/"+n {
			t.Errorf("%s: handler %q, want ./functions/%s", n, fn.Handler, n)
		}
		if _, err := os.Stat(filepath.Join(r.root, "template", fn.Lang, "template.yml")); err != nil {
			t.Errorf("%s: lang %q has no committed template: %v", n, fn.Lang, err)
		}
		if got, want := deploycheck.Expand(fn.Image, nil), "ghcr.io/flagdown/flagdown-"+n+":latest"; got != want {
			t.Errorf("%s: image %q expands to %q, want %q", n, fn.Image, got, want)
		}
		env := map[string]string{"REGISTRY": "registry.example/acme", "TAG": "v9.9.9"}
		if got, want := deploycheck.Expand(fn.Image, env), "registry.example/acme/flagdown-"+n+":v9.9.9"; got != want {
			t.Errorf("%s: image %q with REGISTRY and TAG set expands to %q, want %q", n, fn.Image, got, want)
		}
		if fn.Annotations["com.openfaas.health.http.path"] != "/_/health" || fn.Annotations["com.openfaas.ready.http.path"] != "/_/ready" {
			t.Errorf("%s: health/ready annotations must be /_/health and /_/ready (template main.go): %v", n, fn.Annotations)
		}
		if fn.Annotations["prometheus.io.scrape"] != "true" || fn.Annotations["prometheus.io.port"] != internalPort || fn.Annotations["prometheus.io.path"] != "/metrics" {
			t.Errorf("%s: scrape annotations must be prometheus.io.scrape true, port %s (the internal listener, host.DefaultInternalAddr), path /metrics (template main.go): %v", n, internalPort, fn.Annotations)
		}
		if fn.Limits["memory"] == "" || fn.Limits["cpu"] == "" || fn.Requests["memory"] == "" {
			t.Errorf("%s: limits and requests must be set", n)
		}
		for _, f := range fn.EnvironmentFile {
			if f != "deploy/openfaas/env.yml" {
				t.Errorf("%s: environment_file %s: only deploy/openfaas/env.yml is checked", n, f)
			}
		}
	}
	for _, p := range []string{"./go.mod", "./go.sum", "./shared", "./events", "./migrations"} {
		if !slices.Contains(r.stack.Configuration.Copy, p) {
			t.Errorf("configuration.copy lacks %s: the handler's imports need it in the build context", p)
		}
	}
	for _, p := range r.stack.Configuration.Copy {
		if _, err := os.Stat(filepath.Join(r.root, p)); err != nil {
			t.Errorf("configuration.copy %s: %v", p, err)
		}
	}
}

// TestCredentialsOnlyAsSecrets: every secret a deployment mounts is the file of a credential
// variable shared/config reads from /var/openfaas/secrets, and no credential is plain environment.
func TestCredentialsOnlyAsSecrets(t *testing.T) {
	r := load(t)
	secretFiles := map[string]string{}
	for _, v := range config.SecretVars {
		secretFiles[config.SecretFileName(v)] = v
	}
	for n, fn := range r.stack.Functions {
		for _, s := range fn.Secrets {
			if secretFiles[s] == "" {
				t.Errorf("%s: secret %s is not a credential file shared/config reads (%v)", n, s, config.SecretVars)
			}
		}
		for _, want := range []string{"database-url", "redis-url"} {
			if !slices.Contains(fn.Secrets, want) {
				t.Errorf("%s: secrets lack %s", n, want)
			}
		}
		for k := range fn.Environment {
			if slices.Contains(config.SecretVars, k) {
				t.Errorf("%s: credential %s as plain environment", n, k)
			}
		}
	}
	for k := range r.envFile {
		if slices.Contains(config.SecretVars, k) {
			t.Errorf("deploy/openfaas/env.yml: credential %s as plain environment", k)
		}
	}
	for _, ms := range [][]deploycheck.Manifest{r.knative, r.openfaas} {
		for _, m := range ms {
			for _, c := range podContainers(m) {
				for _, e := range deploycheck.List(c, "env") {
					if name := deploycheck.Str(e, "name"); slices.Contains(config.SecretVars, name) {
						t.Errorf("%s %s: credential %s as plain environment", m.File, m.Name(), name)
					}
				}
				for _, vm := range deploycheck.List(c, "volumeMounts") {
					if deploycheck.Str(vm, "name") == "secrets" && deploycheck.Str(vm, "mountPath") != config.DefaultSecretsDir {
						t.Errorf("%s %s: secrets mounted at %s, shared/config reads %s", m.File, m.Name(), deploycheck.Str(vm, "mountPath"), config.DefaultSecretsDir)
					}
				}
			}
			for _, key := range secretKeys(m) {
				if secretFiles[key] == "" {
					t.Errorf("%s %s: secret key %s is not a credential file shared/config reads", m.File, m.Name(), key)
				}
			}
		}
	}
}

// podContainers returns the containers of a Deployment, Job, CronJob or Knative Service.
func podContainers(m deploycheck.Manifest) []any {
	switch m.Kind() {
	case "Deployment", "Job", "Service":
		return deploycheck.List(m.Object, "spec", "template", "spec", "containers")
	case "CronJob":
		return deploycheck.List(m.Object, "spec", "jobTemplate", "spec", "template", "spec", "containers")
	}
	return nil
}

// podVolumes returns the volumes of a Deployment, Job, CronJob or Knative Service.
func podVolumes(m deploycheck.Manifest) []any {
	if m.Kind() == "CronJob" {
		return deploycheck.List(m.Object, "spec", "jobTemplate", "spec", "template", "spec", "volumes")
	}
	return deploycheck.List(m.Object, "spec", "template", "spec", "volumes")
}

// secretKeys returns the keys of the secrets volume of a workload (Secret or projected volume).
func secretKeys(m deploycheck.Manifest) []string {
	var out []string
	for _, v := range podVolumes(m) {
		if deploycheck.Str(v, "name") != "secrets" {
			continue
		}
		for _, it := range deploycheck.List(v, "secret", "items") {
			out = append(out, deploycheck.Str(it, "key"))
		}
		for _, src := range deploycheck.List(v, "projected", "sources") {
			for _, it := range deploycheck.List(src, "secret", "items") {
				out = append(out, deploycheck.Str(it, "key"))
			}
		}
	}
	return out
}

// TestEnvironmentDocumentedAndKnown: every variable the deployed code reads is in the
// configuration table of docs/configuration.md, and every variable a deployment sets is one the code reads.
func TestEnvironmentDocumentedAndKnown(t *testing.T) {
	r := load(t)
	for v, files := range r.vars {
		if !r.configDoc[v] && !platformVars[v] {
			t.Errorf("%s (read in %s) is not in the configuration table of docs/configuration.md", v, strings.Join(files, ", "))
		}
	}
	known := func(v string) bool { _, ok := r.vars[v]; return ok }
	for n, fn := range r.stack.Functions {
		for k := range fn.Environment {
			if !known(k) {
				t.Errorf("stack.yml %s: environment %s is read by no code", n, k)
			}
		}
	}
	for k := range r.envFile {
		if !known(k) {
			t.Errorf("deploy/openfaas/env.yml: %s is read by no code", k)
		}
	}
	for _, ms := range [][]deploycheck.Manifest{r.knative, r.openfaas} {
		for _, m := range ms {
			if m.Kind() == "ConfigMap" {
				data, _ := deploycheck.Get(m.Object, "data").(map[string]any)
				got := map[string]string{}
				for k, v := range data {
					got[k] = fmt.Sprint(v)
					if !known(k) {
						t.Errorf("%s: ConfigMap key %s is read by no code", m.File, k)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(r.envFile) {
					t.Errorf("%s: ConfigMap data %v differs from deploy/openfaas/env.yml %v", m.File, got, r.envFile)
				}
			}
			for _, c := range podContainers(m) {
				for _, e := range deploycheck.List(c, "env") {
					if k := deploycheck.Str(e, "name"); !known(k) {
						t.Errorf("%s %s: env %s is read by no code", m.File, m.Name(), k)
					}
				}
				for _, ef := range deploycheck.List(c, "envFrom") {
					if name := deploycheck.Str(ef, "configMapRef", "name"); name != "flagdown-config" {
						t.Errorf("%s %s: envFrom %q, want configMapRef flagdown-config", m.File, m.Name(), name)
					}
				}
			}
		}
	}
}

// TestEventRoutes: the trigger table, the code that produces events, stack.yml's topic annotations
// and the Knative Triggers all agree.
func TestEventRoutes(t *testing.T) {
	r := load(t)
	consumers := map[string][]string{} // type → functions
	for _, tr := range events.Triggers {
		if !slices.Contains(r.functions, tr.Function) {
			t.Errorf("events.Triggers routes to %s, which is no functions/ folder", tr.Function)
		}
		for _, typ := range tr.Types {
			if !events.Known(typ) {
				t.Errorf("events.Triggers: %s → %s: type not in events.Types", typ, tr.Function)
			}
			consumers[typ] = append(consumers[typ], tr.Function)
		}
	}

	// Producers: a type is produced when code outside events/ and outside its consumers names it.
	produced := producedTypes(t, r.root, consumers)
	for typ := range consumers {
		if len(produced[typ]) == 0 {
			t.Errorf("%s is consumed (%v) but nothing produces it", typ, consumers[typ])
		}
	}
	for typ := range events.Types {
		if len(produced[typ]) == 0 {
			t.Errorf("%s is in events.Types but nothing produces it", typ)
		}
	}

	// OpenFaaS: the topic annotation lists exactly <subject prefix>.<type> of the function's types.
	prefix := r.envFile["FLAGDOWN_SUBJECT_PREFIX"]
	if prefix == "" {
		prefix = "flagdown.events"
	}
	for n, fn := range r.stack.Functions {
		var want []string
		for _, typ := range events.TypesFor(n) {
			want = append(want, prefix+"."+typ)
		}
		var got []string
		if topic := fn.Annotations["topic"]; topic != "" && topic != "cron-function" {
			got = strings.Split(topic, ",")
		}
		sort.Strings(want)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("stack.yml %s: topic %v, want %v (events.Triggers)", n, got, want)
		}
	}

	// Knative: one Trigger per (type → function), type filter, delivery with retries and a dead-letter sink.
	want := map[string]bool{}
	for typ, fns := range consumers {
		for _, fn := range fns {
			want[fn+" "+typ] = true
		}
	}
	services := r.byKind(r.knative, "Service")
	brokers := r.byKind(r.knative, "Broker")
	got := map[string]bool{}
	for name, m := range r.byKind(r.knative, "Trigger") {
		fn := deploycheck.Str(m.Object, "spec", "subscriber", "ref", "name")
		typ := deploycheck.Str(m.Object, "spec", "filter", "attributes", "type")
		key := fn + " " + typ
		if got[key] {
			t.Errorf("Trigger %s duplicates %s", name, key)
		}
		got[key] = true
		if !want[key] {
			t.Errorf("Trigger %s routes %q to %q: not in events.Triggers", name, typ, fn)
		}
		if _, ok := services[fn]; !ok {
			t.Errorf("Trigger %s: subscriber %s is no Service", name, fn)
		}
		if b := deploycheck.Str(m.Object, "spec", "broker"); brokers[b].Object == nil {
			t.Errorf("Trigger %s: broker %q is not defined", name, b)
		}
		checkDelivery(t, "Trigger "+name, deploycheck.Get(m.Object, "spec", "delivery"), services)
	}
	for key := range want {
		if !got[key] {
			t.Errorf("no Knative Trigger for %s (events.Triggers)", key)
		}
	}
	for name, b := range brokers {
		checkDelivery(t, "Broker "+name, deploycheck.Get(b.Object, "spec", "delivery"), services)
	}

	// Scheduled functions: reconcile needs the internal token, which neither the OpenFaaS
	// cron-connector nor a Knative PingSource can send, so a CronJob running `flagdown cron` with
	// the secret flagdown-internal-token calls it, on both platforms on the same schedule.
	for n, fn := range r.stack.Functions {
		if fn.Annotations["topic"] == "cron-function" || fn.Annotations["schedule"] != "" {
			t.Errorf("stack.yml %s: cron-connector annotations, but the cron-connector cannot send the internal credential (use a CronJob)", n)
		}
	}
	if pings := r.byKind(r.knative, "PingSource"); len(pings) > 0 {
		t.Errorf("deploy/knative: PingSource %v cannot send the internal credential (use a CronJob)", slices.Collect(maps.Keys(pings)))
	}
	wantURL := map[string]string{
		"deploy/openfaas": "http://gateway.openfaas:8080/function/reconcile",
		"deploy/knative":  "http://reconcile.flagdown.svc.cluster.local/",
	}
	schedules := map[string]string{}
	for dir, ms := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
		cj, ok := r.byKind(ms, "CronJob")["flagdown-reconcile-cron"]
		if !ok {
			t.Errorf("%s: no CronJob flagdown-reconcile-cron calling reconcile", dir)
			continue
		}
		schedules[dir] = deploycheck.Str(cj.Object, "spec", "schedule")
		if schedules[dir] == "" || deploycheck.Str(cj.Object, "spec", "concurrencyPolicy") != "Forbid" {
			t.Errorf("%s CronJob %s: needs a schedule and concurrencyPolicy Forbid", dir, cj.Name())
		}
		for _, c := range podContainers(cj) {
			args := fmt.Sprint(deploycheck.List(c, "args"))
			if want := fmt.Sprint([]any{"cron", "--url", wantURL[dir]}); args != want {
				t.Errorf("%s CronJob %s: args %s, want %s", dir, cj.Name(), args, want)
			}
		}
		if keys := secretKeys(cj); !slices.Equal(keys, []string{"flagdown-internal-token"}) {
			t.Errorf("%s CronJob %s: secret keys %v, want only flagdown-internal-token", dir, cj.Name(), keys)
		}
	}
	if schedules["deploy/openfaas"] != schedules["deploy/knative"] {
		t.Errorf("reconcile CronJob schedules differ: %v", schedules)
	}
}

func checkDelivery(t *testing.T, what string, d any, services map[string]deploycheck.Manifest) {
	t.Helper()
	retry, _ := deploycheck.Get(d, "retry").(int)
	if retry < 1 || deploycheck.Str(d, "backoffPolicy") == "" || deploycheck.Str(d, "backoffDelay") == "" {
		t.Errorf("%s: delivery needs retry, backoffPolicy and backoffDelay: %v", what, d)
	}
	dl := deploycheck.Str(d, "deadLetterSink", "ref", "name")
	if _, ok := services[dl]; !ok {
		t.Errorf("%s: deadLetterSink %q is no Service", what, dl)
	}
}

var eventConstRE = regexp.MustCompile(`\bevents\.([A-Z][A-Za-z]+)\b`)

// producedTypes maps each event type to the non-test files outside events/ that name its constant,
// leaving out the type's consumers' own folders (a consumer naming the type it receives does not
// produce it).
func producedTypes(t *testing.T, root string, consumers map[string][]string) map[string][]string {
	t.Helper()
	byConst := map[string]string{}
	for _, typ := range constNames(t, root) {
		byConst[typ[0]] = typ[1]
	}
	out := map[string][]string{}
	for _, dir := range []string{"functions", "shared", "cmd"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testkit") {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			rel = filepath.ToSlash(rel)
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range eventConstRE.FindAllSubmatch(b, -1) {
				typ := byConst[string(m[1])]
				if typ == "" {
					continue
				}
				consumer := false
				for _, fn := range consumers[typ] {
					if strings.HasPrefix(rel, "functions/"+fn+"/") {
						consumer = true
					}
				}
				if !consumer && !slices.Contains(out[typ], rel) {
					out[typ] = append(out[typ], rel)
				}
			}
			return nil
		})
	}
	return out
}

var constRE = regexp.MustCompile(`(?m)^\s*([A-Z][A-Za-z]+)\s*=\s*"(io\.flagdown\.[a-z0-9.]+)"`)

// constNames returns (constant, type) pairs declared in events/events.go.
func constNames(t *testing.T, root string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "events", "events.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for _, m := range constRE.FindAllStringSubmatch(string(b), -1) {
		out = append(out, [2]string{m[1], m[2]})
	}
	if len(out) != len(events.Types) {
		t.Fatalf("events/events.go: found %d type constants, events.Types has %d", len(out), len(events.Types))
	}
	return out
}

// TestKnativeServicesMatchStack: a Knative Service per function, with the image stack.yml builds,
// scaling like the OpenFaaS labels, probes on the template's paths and the function's secrets.
func TestKnativeServicesMatchStack(t *testing.T) {
	r := load(t)
	services := r.byKind(r.knative, "Service")
	for _, n := range r.functions {
		m, ok := services[n]
		if !ok {
			t.Errorf("deploy/knative: no Service for function %s", n)
			continue
		}
		cs := podContainers(m)
		if len(cs) != 1 {
			t.Errorf("Service %s: want one container", n)
			continue
		}
		c := cs[0]
		fn := r.stack.Functions[n]
		if got, want := imageRepo(deploycheck.Str(c, "image")), imageRepo(deploycheck.Expand(fn.Image, nil)); got != want {
			t.Errorf("Service %s: image %s, stack.yml builds %s", n, got, want)
		}
		if p := deploycheck.Str(c, "readinessProbe", "httpGet", "path"); p != "/_/ready" {
			t.Errorf("Service %s: readiness path %q, want /_/ready", n, p)
		}
		if p := deploycheck.Str(c, "livenessProbe", "httpGet", "path"); p != "/_/health" {
			t.Errorf("Service %s: liveness path %q, want /_/health", n, p)
		}
		keys := secretKeys(m)
		sort.Strings(keys)
		want := slices.Clone(fn.Secrets)
		sort.Strings(want)
		if !slices.Equal(keys, want) {
			t.Errorf("Service %s: secret keys %v, stack.yml secrets %v", n, keys, want)
		}
		ann := deploycheck.Get(m.Object, "spec", "template", "metadata", "annotations")
		minScale, maxScale := deploycheck.Str(ann, "autoscaling.knative.dev/min-scale"), deploycheck.Str(ann, "autoscaling.knative.dev/max-scale")
		wantMin := fn.Labels["com.openfaas.scale.min"]
		if fn.Labels["com.openfaas.scale.zero"] == "true" {
			wantMin = "0"
		}
		if minScale != wantMin || maxScale != fn.Labels["com.openfaas.scale.max"] {
			t.Errorf("Service %s: min/max scale %s/%s, stack.yml says %s/%s", n, minScale, maxScale, wantMin, fn.Labels["com.openfaas.scale.max"])
		}
		if deploycheck.Str(ann, "prometheus.io/scrape") != "true" || deploycheck.Str(ann, "prometheus.io/port") != internalPort || deploycheck.Str(ann, "prometheus.io/path") != "/metrics" {
			t.Errorf("Service %s: scrape annotations must be prometheus.io/scrape true, port %s (the internal listener, host.DefaultInternalAddr), path /metrics: %v", n, internalPort, ann)
		}
		if deploycheck.Str(ann, "autoscaling.knative.dev/min-scale") == "0" && len(events.TypesFor(n)) > 0 {
			t.Errorf("Service %s: event-triggered functions must not scale to zero", n)
		}
	}
	for name := range services {
		if name != "flagdown-dead-letters" && !slices.Contains(r.functions, name) {
			t.Errorf("deploy/knative: Service %s is no function", name)
		}
	}
}

var (
	cobraUseRE   = regexp.MustCompile(`Use:\s+"([a-z-]+)`)
	dockerfileRE = regexp.MustCompile(`(?m)^FROM\s+\S+\s+AS\s+(\S+)\s*$`)
)

// TestLongRunningParts: the relay, expiry source and migrate workloads run flagdown subcommands
// that exist, from images the Dockerfile builds, and every image a manifest uses is in its
// kustomization's images list.
func TestLongRunningParts(t *testing.T) {
	r := load(t)
	cmds := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(r.root, "cmd/flagdown/*.go"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range cobraUseRE.FindAllSubmatch(b, -1) {
			cmds[string(m[1])] = true
		}
	}
	df, err := os.ReadFile(filepath.Join(r.root, "deploy/docker/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range dockerfileRE.FindAllSubmatch(df, -1) {
		targets[string(m[1])] = true
	}
	for dir, ms := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
		kust, _ := deploycheck.LoadManifests(r.root, []string{dir + "/kustomization.yaml"})
		images := map[string]bool{}
		for _, im := range deploycheck.List(kust[0].Object, "images") {
			images[deploycheck.Str(im, "name")] = true
		}
		for _, m := range ms {
			for _, c := range podContainers(m) {
				img := imageRepo(deploycheck.Str(c, "image"))
				if strings.HasPrefix(img, "ghcr.io/flagdown/") && !images[img] && !strings.HasSuffix(m.File, "migrate-job.yaml") {
					t.Errorf("%s: image %s of %s is not in kustomization images", dir, img, m.Name())
				}
				if m.Kind() == "Service" {
					continue
				}
				args := deploycheck.List(c, "args")
				if len(args) == 0 {
					t.Errorf("%s %s: no args (flagdown subcommand)", m.File, m.Name())
					continue
				}
				sub, _ := args[0].(string)
				if !cmds[sub] {
					t.Errorf("%s %s: flagdown has no command %q", m.File, m.Name(), sub)
				}
				if want := "ghcr.io/flagdown/flagdown-" + sub; img != want || !targets[sub] {
					t.Errorf("%s %s: image %s, want %s built by deploy/docker/Dockerfile --target %s", m.File, m.Name(), img, want, sub)
				}
			}
		}
	}
	for _, want := range []string{"relay", "expiry-source"} {
		if !cmds[want] {
			continue // issue 3 not merged yet: nothing to deploy
		}
		for dir, ms := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
			if _, ok := r.byKind(ms, "Deployment")["flagdown-"+want]; !ok {
				t.Errorf("%s: no Deployment flagdown-%s for `flagdown %s`", dir, want, want)
			}
		}
	}
}

// TestWorkflowReferences: the deploy workflow runs make test first and references only files,
// Dockerfile targets and make targets that exist.
func TestWorkflowReferences(t *testing.T) {
	r := load(t)
	b, err := os.ReadFile(filepath.Join(r.root, ".github/workflows/deploy.yml"))
	if err != nil {
		t.Fatal(err)
	}
	wf := string(b)
	if _, err := deploycheck.LoadManifests(r.root, []string{".github/workflows/deploy.yml"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range regexp.MustCompile(`(?:-f|-k|--file)\s+([\w.-]+/[\w./-]*|[\w-]+\.ya?ml)`).FindAllStringSubmatch(wf, -1) {
		if _, err := os.Stat(filepath.Join(r.root, p[1])); err != nil {
			t.Errorf("workflow references %s: %v", p[1], err)
		}
	}
	df, _ := os.ReadFile(filepath.Join(r.root, "deploy/docker/Dockerfile"))
	for _, m := range regexp.MustCompile(`--target\s+([\w$-]+)`).FindAllStringSubmatch(wf, -1) {
		if !strings.Contains(m[1], "$") && !regexp.MustCompile(`(?m)^FROM\s+\S+\s+AS\s+`+regexp.QuoteMeta(m[1])+`\s*$`).Match(df) {
			t.Errorf("workflow builds Dockerfile target %s, which does not exist", m[1])
		}
	}
	mk, _ := os.ReadFile(filepath.Join(r.root, "Makefile"))
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:run:\s*)?make\s+([a-z-]+)\s*$`).FindAllStringSubmatch(wf, -1) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).Match(mk) {
			t.Errorf("workflow runs make %s, which the Makefile lacks", m[1])
		}
	}
	if i, j := strings.Index(wf, "run: make test"), strings.Index(wf, "faas-cli publish"); i < 0 || j < 0 || i > j {
		t.Errorf("workflow must run make test before faas-cli")
	}
}

// TestLongRunningPartsServeMetrics: the relay and expiry-source Deployments are scraped, and their
// prometheus.io annotations name the port their --metrics-addr serves and the container exposes.
func TestLongRunningPartsServeMetrics(t *testing.T) {
	r := load(t)
	for dir, ms := range map[string][]deploycheck.Manifest{"deploy/knative": r.knative, "deploy/openfaas": r.openfaas} {
		deps := r.byKind(ms, "Deployment")
		for _, name := range []string{"flagdown-relay", "flagdown-expiry-source"} {
			m, ok := deps[name]
			if !ok {
				t.Errorf("%s: no Deployment %s", dir, name)
				continue
			}
			ann, _ := deploycheck.Get(m.Object, "spec", "template", "metadata", "annotations").(map[string]any)
			port := fmt.Sprint(ann["prometheus.io/port"])
			if fmt.Sprint(ann["prometheus.io/scrape"]) != "true" || fmt.Sprint(ann["prometheus.io/path"]) != "/metrics" || port == "" {
				t.Errorf("%s %s: pod annotations %v; want prometheus.io/scrape \"true\", port, path /metrics", m.File, name, ann)
				continue
			}
			cs := podContainers(m)
			if len(cs) != 1 {
				t.Errorf("%s %s: %d containers, want 1", m.File, name, len(cs))
				continue
			}
			args := fmt.Sprint(deploycheck.List(cs[0], "args"))
			if !strings.Contains(args, "--metrics-addr=:"+port) {
				t.Errorf("%s %s: args %s lack --metrics-addr=:%s", m.File, name, args, port)
			}
			exposed := false
			for _, p := range deploycheck.List(cs[0], "ports") {
				if fmt.Sprint(deploycheck.Get(p, "containerPort")) == port {
					exposed = true
				}
			}
			if !exposed {
				t.Errorf("%s %s: no containerPort %s", m.File, name, port)
			}
		}
	}
}
