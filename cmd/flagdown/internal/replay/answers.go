package replay

import (
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// AnswerOps are the endpoints whose answers the replay times (answerLog): the ones PostgreSQL
// decides, which must keep answering while Redis is away (docs/resilience.md, "When Redis does not
// answer").
var AnswerOps = []string{"order-create", "accept", "start", "complete"}

// answer is one call to an AnswerOps endpoint: when it was sent (wall), how long until its answer
// or its error, and the HTTP status (0: no answer, a transport error or a timeout).
type answer struct {
	op     string
	at     time.Time
	dur    time.Duration
	status int
}

// answerLog records the client's calls to AnswerOps endpoints; safe for concurrent use.
type answerLog struct {
	mu sync.Mutex
	a  []answer
}

// add records one call.
func (l *answerLog) add(a answer) {
	l.mu.Lock()
	l.a = append(l.a, a)
	l.mu.Unlock()
}

// list is a copy of the calls recorded so far.
func (l *answerLog) list() []answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]answer{}, l.a...)
}

// answerOp names the AnswerOps endpoint of a request, or "" for any other.
func answerOp(method, path string) string {
	if method != http.MethodPost {
		return ""
	}
	switch {
	case path == "/function/order-create":
		return "order-create"
	case path == "/function/accept":
		return "accept"
	case strings.HasPrefix(path, "/function/ride/"):
		switch path[strings.LastIndexByte(path, '/')+1:] {
		case "start":
			return "start"
		case "complete":
			return "complete"
		}
	}
	return ""
}

// OutageAnswers is how one endpoint answered the calls sent while outages of one kind were under
// way.
type OutageAnswers struct {
	// Calls is how many calls were sent inside such an outage; OK how many of them were answered
	// 2xx, Conflicts how many 4xx (a final answer: the ride moved on), Failed how many got a 5xx,
	// a 429 or no answer.
	Calls     int `json:"calls"`
	OK        int `json:"ok"`
	Conflicts int `json:"conflicts"`
	Failed    int `json:"failed"`
	// P50Ms, P99Ms and MaxMs are the latencies of the 2xx answers, wall milliseconds.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// answersDuringOutages groups the calls sent inside an outage by the outage's kind (Outage.What)
// and endpoint. An outage not yet over counts until now.
func answersDuringOutages(calls []answer, outages []Outage, now time.Time) map[string]map[string]OutageAnswers {
	out := map[string]map[string]OutageAnswers{}
	lat := map[string]map[string][]float64{}
	for _, c := range calls {
		for _, o := range outages {
			to := o.To
			if to.IsZero() {
				to = now
			}
			if c.at.Before(o.From) || c.at.After(to) {
				continue
			}
			if out[o.What] == nil {
				out[o.What], lat[o.What] = map[string]OutageAnswers{}, map[string][]float64{}
			}
			a := out[o.What][c.op]
			a.Calls++
			switch {
			case c.status >= 200 && c.status < 300:
				a.OK++
				lat[o.What][c.op] = append(lat[o.What][c.op], float64(c.dur)/float64(time.Millisecond))
			case c.status >= 400 && c.status < 500 && c.status != http.StatusTooManyRequests:
				a.Conflicts++
			default:
				a.Failed++
			}
			out[o.What][c.op] = a
			break // one outage per call: the outages of a run do not overlap
		}
	}
	for what, ops := range out {
		for op, a := range ops {
			if l := lat[what][op]; len(l) > 0 {
				a.P50Ms, a.P99Ms = Percentile(l, 50), Percentile(l, 99)
				sort.Float64s(l)
				a.MaxMs = l[len(l)-1]
			}
			ops[op] = a
		}
	}
	return out
}

// writeOutageAnswers prints m with row, one row per outage kind and endpoint, in a stable order.
func writeOutageAnswers(m map[string]map[string]OutageAnswers, row func(k, format string, args ...any)) {
	kinds := make([]string, 0, len(m))
	for k := range m {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		for _, op := range AnswerOps {
			a, ok := m[k][op]
			if !ok {
				continue
			}
			row("during "+k+": "+op, "%d of %d answered 2xx, %d 4xx, %d failed; 2xx p50/p99/max %.0f / %.0f / %.0f ms wall",
				a.OK, a.Calls, a.Conflicts, a.Failed, a.P50Ms, a.P99Ms, a.MaxMs)
		}
	}
}
