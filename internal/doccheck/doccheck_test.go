package doccheck_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/flagdown/flagdown/internal/doccheck"
)

// repoRoot is the module root: the package folder's grandparent, checked by its go.mod.
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

// docFiles returns README.md and every Markdown file under docs/, relative to root, sorted.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	sort.Strings(out[1:])
	return out
}

func read(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func lineCount(s string) int { return strings.Count(s, "\n") }

// TestReadmeIsAFrontDoor: the README is short and names the two commands.
func TestReadmeIsAFrontDoor(t *testing.T) {
	root := repoRoot(t)
	s := read(t, root, "README.md")
	if n := lineCount(s); n > doccheck.ReadmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail into a page under docs/", n, doccheck.ReadmeMaxLines)
	}
	for _, cmd := range []string{"make demo", "make test"} {
		if !strings.Contains(s, cmd) {
			t.Errorf("README.md does not name %q", cmd)
		}
	}
}

// TestPagesAreBoundedAndIndexed: no page under docs/ is longer than PageMaxLines, and
// docs/README.md links every other page.
func TestPagesAreBoundedAndIndexed(t *testing.T) {
	root := repoRoot(t)
	index := read(t, root, "docs/README.md")
	linked := map[string]bool{}
	for _, l := range links(index) {
		linked[strings.SplitN(l.target, "#", 2)[0]] = true
	}
	for _, rel := range docFiles(t, root)[1:] {
		if n := lineCount(read(t, root, rel)); n > doccheck.PageMaxLines {
			t.Errorf("%s has %d lines, want at most %d: split it", rel, n, doccheck.PageMaxLines)
		}
		if base := strings.TrimPrefix(rel, "docs/"); base != "README.md" && !linked[base] {
			t.Errorf("docs/README.md does not link %s", base)
		}
	}
}

type link struct {
	line   int
	target string
}

var (
	linkRE  = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)
	fenceRE = regexp.MustCompile("^\\s*(```|~~~)")
)

// links returns the targets of the Markdown links and images of s outside code fences and code
// spans.
func links(s string) []link {
	var out []link
	fenced := false
	for i, line := range strings.Split(s, "\n") {
		if fenceRE.MatchString(line) {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatchIndex(stripCodeSpans(line), -1) {
			out = append(out, link{i + 1, stripCodeSpans(line)[m[2]:m[3]]})
		}
	}
	return out
}

// stripCodeSpans blanks the text between backticks, so a link inside a code span is not a link.
func stripCodeSpans(line string) string {
	b := []byte(line)
	in := false
	for i, c := range b {
		if c == '`' {
			in = !in
			continue
		}
		if in {
			b[i] = ' '
		}
	}
	return string(b)
}

// anchors returns the fragment ids GitHub gives the headings of the Markdown s: lower case,
// punctuation other than '-' and '_' dropped, spaces as '-', a repeated id suffixed -1, -2, ...
func anchors(s string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(s, "\n") {
		if fenceRE.MatchString(line) {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			out[id+"-"+strconv.Itoa(n)] = true
		} else {
			out[id] = true
		}
		seen[id]++
	}
	return out
}

// TestLinksResolve: every relative link of the README and of docs/ names a file of the repository,
// and a #fragment names a heading of the Markdown file it points into.
func TestLinksResolve(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	for _, rel := range docFiles(t, root) {
		for _, l := range links(read(t, root, rel)) {
			if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
				continue
			}
			checked++
			file, frag, _ := strings.Cut(l.target, "#")
			dest := rel
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(rel), file)))
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", rel, l.line, l.target, dest)
				continue
			}
			if frag != "" {
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %q: a fragment into a file that is not Markdown", rel, l.line, l.target)
				} else if !anchors(read(t, root, dest))[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading #%s", rel, l.line, l.target, dest, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the link parser is broken")
	}
}

// TestAnchors pins the heading ids the link check relies on to GitHub's rules.
func TestAnchors(t *testing.T) {
	got := anchors("# Mobile push fallback (SNS)\n## GET /function/ride/{id}\n```\n# not a heading\n```\n## How `make chaos` shows it\n## Tracing\n## Tracing\n")
	for _, want := range []string{"mobile-push-fallback-sns", "get-functionrideid", "how-make-chaos-shows-it", "tracing", "tracing-1"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("anchors: a line inside a code fence counted as a heading")
	}
}
