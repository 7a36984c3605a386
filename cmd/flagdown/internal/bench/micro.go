package bench

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// benchLine matches a `go test -bench -benchmem` result line.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op(.*)$`)

var metricRe = regexp.MustCompile(`([0-9.]+) (B/op|allocs/op)`)

// micro adds one row per benchmark of path (go test -bench -benchmem output). Micro-benchmarks
// have no raw ceiling: they are for validation, scoring and codec costs and their allocations.
func (r *runner) micro(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	pkg := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/flagdown/flagdown/")
			continue
		}
		m := benchLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(m[2], 64)
		var extra []string
		for _, mm := range metricRe.FindAllStringSubmatch(m[3], -1) {
			extra = append(extra, mm[1]+" "+mm[2])
		}
		r.rep.add(Row{Section: "micro", Name: fmt.Sprintf("%s %s", pkg, m[1]), Value: ns, Unit: "ns/op", Note: strings.Join(extra, ", ")})
	}
	return sc.Err()
}
