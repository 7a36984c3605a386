package metrics_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/flagdown/flagdown/shared/metrics"
)

// docRowRE is one row of the Metrics table of docs/operations.md: | `name` | type | labels | meaning |.
var docRowRE = regexp.MustCompile("(?m)^\\| `(flagdown_[a-z_]+)` \\| ([a-z]+) \\| ([^|]*)\\|")

// TestDocListsEveryFamily: the Metrics table of docs/operations.md names exactly metrics.Families,
// each with the type and the labels the collectors give it.
func TestDocListsEveryFamily(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docRowRE.FindAllStringSubmatch(string(b), -1)
	type row struct{ typ, labels string }
	doc := map[string]row{}
	var order []string
	for _, r := range rows {
		labels := strings.Join(strings.Fields(strings.NewReplacer("`", "", ",", " ").Replace(r[3])), ",")
		doc[r[1]] = row{r[2], labels}
		order = append(order, r[1])
	}
	if strings.Join(order, " ") != strings.Join(metrics.Families, " ") {
		t.Errorf("docs/operations.md Metrics table\n %v\nwant metrics.Families\n %v", order, metrics.Families)
	}

	touchAll()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.Collectors()...)
	reg.MustRegister(metrics.NewFleetCollector(okFleet, time.Second))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	types := map[dto.MetricType]string{dto.MetricType_COUNTER: "counter", dto.MetricType_GAUGE: "gauge", dto.MetricType_HISTOGRAM: "histogram"}
	for _, mf := range mfs {
		d, ok := doc[mf.GetName()]
		if !ok {
			continue // not in the table: the list check above reports it
		}
		if got := types[mf.GetType()]; got != d.typ {
			t.Errorf("%s: docs/operations.md says %s, registered as %s", mf.GetName(), d.typ, got)
		}
		var labels []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labels = append(labels, lp.GetName())
		}
		if got := strings.Join(labels, ","); got != d.labels && !sameSet(got, d.labels) {
			t.Errorf("%s: docs/operations.md labels %q, registered %q", mf.GetName(), d.labels, got)
		}
	}
}

func sameSet(a, b string) bool {
	as, bs := strings.Split(a, ","), strings.Split(b, ",")
	if len(as) != len(bs) {
		return false
	}
	m := map[string]bool{}
	for _, x := range as {
		m[x] = true
	}
	for _, x := range bs {
		if !m[x] {
			return false
		}
	}
	return true
}
