// Package deploycheck reads flagdown's deployment files (stack.yml, the golang-flagdown template,
// deploy/knative) and the facts of the source tree they must agree with (the functions/ folders, the
// trigger table, the environment variables the code reads, the configuration table of docs/configuration.md). Its
// tests keep the deployments honest without a cluster; its Layout and Build reproduce faas-cli's
// build context and the template's build step without Docker (scripts/buildcontext.sh).
package deploycheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Stack is the part of an OpenFaaS stack.yml flagdown uses.
type Stack struct {
	Version  string `yaml:"version"`
	Provider struct {
		Name    string `yaml:"name"`
		Gateway string `yaml:"gateway"`
	} `yaml:"provider"`
	Configuration struct {
		// Copy are the extra paths faas-cli copies into every function's handler folder.
		Copy      []string `yaml:"copy"`
		Templates []struct {
			Name   string `yaml:"name"`
			Source string `yaml:"source"`
		} `yaml:"templates"`
	} `yaml:"configuration"`
	Functions map[string]Function `yaml:"functions"`
}

// Function is one stack.yml function entry.
type Function struct {
	Lang            string            `yaml:"lang"`
	Handler         string            `yaml:"handler"`
	Image           string            `yaml:"image"`
	Environment     map[string]string `yaml:"environment"`
	EnvironmentFile []string          `yaml:"environment_file"`
	Secrets         []string          `yaml:"secrets"`
	Labels          map[string]string `yaml:"labels"`
	Annotations     map[string]string `yaml:"annotations"`
	Limits          map[string]string `yaml:"limits"`
	Requests        map[string]string `yaml:"requests"`
	BuildArgs       map[string]string `yaml:"build_args"`
}

// LoadStack parses the stack file at path, rejecting unknown fields.
func LoadStack(path string) (*Stack, error) {
	var s Stack
	if err := decodeStrict(path, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// EnvFile is an OpenFaaS environment_file: {environment: {NAME: value}}.
type EnvFile struct {
	Environment map[string]string `yaml:"environment"`
}

// LoadEnvFile parses an environment_file.
func LoadEnvFile(path string) (map[string]string, error) {
	var f EnvFile
	if err := decodeStrict(path, &f); err != nil {
		return nil, err
	}
	return f.Environment, nil
}

func decodeStrict(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

var substRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// Expand does faas-cli's environment substitution on s: ${NAME} and ${NAME:-default}, values from
// env (a missing or empty NAME takes the default).
func Expand(s string, env map[string]string) string {
	return substRE.ReplaceAllStringFunc(s, func(m string) string {
		g := substRE.FindStringSubmatch(m)
		if v := env[g[1]]; v != "" {
			return v
		}
		return g[3]
	})
}

// Vars returns the names substituted in s (${NAME...}).
func Vars(s string) []string {
	var out []string
	for _, g := range substRE.FindAllStringSubmatch(s, -1) {
		out = append(out, g[1])
	}
	return out
}

// Manifest is one Kubernetes object of a YAML stream, kept generic.
type Manifest struct {
	// File is the path it was read from, relative to the repository root.
	File string
	// Object is the decoded document.
	Object map[string]any
}

// Kind returns the object's kind.
func (m Manifest) Kind() string { return Str(m.Object, "kind") }

// Name returns metadata.name.
func (m Manifest) Name() string { return Str(m.Object, "metadata", "name") }

// LoadManifests decodes every document of every file (paths relative to root).
func LoadManifests(root string, files []string) ([]Manifest, error) {
	var out []Manifest
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var doc map[string]any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if doc != nil {
				out = append(out, Manifest{File: f, Object: doc})
			}
		}
	}
	return out, nil
}

// Get walks obj along path (map keys, or "[i]"-free: only maps) and returns the value or nil.
func Get(obj any, path ...string) any {
	cur := obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// Str is Get as a string ("" when absent or not a string).
func Str(obj any, path ...string) string {
	s, _ := Get(obj, path...).(string)
	return s
}

// List is Get as a list (nil when absent or not a list).
func List(obj any, path ...string) []any {
	l, _ := Get(obj, path...).([]any)
	return l
}

// FunctionNames returns the folders under root/functions that hold a handler.go, sorted.
func FunctionNames(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "functions", e.Name(), "handler.go")); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

var (
	envTagRE      = regexp.MustCompile("env:\"([A-Z][A-Z0-9_]*)\"")
	envCallRE     = regexp.MustCompile(`(?:Getenv|LookupEnv|Setenv)\("([A-Za-z][A-Za-z0-9_]*)"\)`)
	flagdownLitRE = regexp.MustCompile(`"((?:FLAGDOWN|OTEL)_[A-Z0-9_]+)"`)
)

// EnvVarsRead returns every environment variable the Go code under dirs (relative to root) reads,
// test files excluded, mapped to the files that mention it: struct tags env:"NAME" (shared/config),
// os.Getenv/LookupEnv("NAME") calls, and "FLAGDOWN_..." and "OTEL_..." string literals (variables
// looked up in a map or through a getenv function, as shared/tracing decides whether to trace).
func EnvVarsRead(root string, dirs ...string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, d := range dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && (e.Name() == "testdata" || e.Name() == "testkit") {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			seen := map[string]bool{}
			for _, re := range []*regexp.Regexp{envTagRE, envCallRE, flagdownLitRE} {
				for _, m := range re.FindAllSubmatch(b, -1) {
					name := string(m[1])
					if !seen[name] {
						seen[name] = true
						out[name] = append(out[name], filepath.ToSlash(rel))
					}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

var tableRowRE = regexp.MustCompile("^\\|\\s*`([A-Za-z_][A-Za-z0-9_]*)`\\s*\\|")

// ConfigDocHeading is the heading of docs/configuration.md under which the table of environment
// variables stands.
const ConfigDocHeading = "## Environment variables"

// ConfigDocVars returns the variables in the first column of the table under ConfigDocHeading in
// the Markdown file doc (docs/configuration.md).
func ConfigDocVars(doc string) (map[string]bool, error) {
	b, err := os.ReadFile(doc)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.TrimSpace(line) == ConfigDocHeading
			continue
		}
		if in {
			if m := tableRowRE.FindStringSubmatch(line); m != nil {
				out[m[1]] = true
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no configuration table under %q", doc, ConfigDocHeading)
	}
	return out, nil
}
