package replay

import (
	"net/http"
	"testing"
	"time"
)

func TestAnswerOpNamesThePostgreSQLEndpoints(t *testing.T) {
	for _, c := range []struct{ method, path, want string }{
		{http.MethodPost, "/function/order-create", "order-create"},
		{http.MethodPost, "/function/accept", "accept"},
		{http.MethodPost, "/function/ride/r1/start", "start"},
		{http.MethodPost, "/function/ride/r1/complete", "complete"},
		{http.MethodPost, "/function/ride/r1/decline", ""},
		{http.MethodGet, "/function/ride/r1", ""},
		{http.MethodPost, "/function/location-update", ""},
	} {
		if got := answerOp(c.method, c.path); got != c.want {
			t.Errorf("answerOp(%s %s) = %q, want %q", c.method, c.path, got, c.want)
		}
	}
}

func TestAnswersDuringOutagesCountsOnlyCallsSentInside(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	outages := []Outage{{What: "redis_sigstop", From: at(10), To: at(45)}, {What: "platform_sigkill", From: at(60)}}
	calls := []answer{
		{op: "accept", at: at(5), dur: ms(9000), status: 200},   // before: not counted
		{op: "accept", at: at(11), dur: ms(40), status: 200},    // inside the stop
		{op: "accept", at: at(12), dur: ms(600), status: 200},   // inside the stop
		{op: "accept", at: at(13), dur: ms(10), status: 409},    // a final 4xx
		{op: "start", at: at(20), dur: ms(500), status: 503},    // failed
		{op: "start", at: at(21), dur: ms(2000), status: 0},     // no answer
		{op: "start", at: at(22), dur: ms(10), status: 429},     // failed (retried)
		{op: "complete", at: at(50), dur: ms(5), status: 200},   // between outages
		{op: "order-create", at: at(61), dur: ms(7), status: 0}, // the open outage counts until now
	}
	got := answersDuringOutages(calls, outages, at(70))
	acc := got["redis_sigstop"]["accept"]
	if acc.Calls != 3 || acc.OK != 2 || acc.Conflicts != 1 || acc.Failed != 0 || acc.MaxMs != 600 {
		t.Errorf("accept during redis_sigstop = %+v, want 3 calls, 2 ok, 1 conflict, max 600 ms", acc)
	}
	if acc.P99Ms < 40 || acc.P99Ms > 600 {
		t.Errorf("accept p99 = %v ms, want within the two 2xx latencies", acc.P99Ms)
	}
	st := got["redis_sigstop"]["start"]
	if st.Calls != 3 || st.OK != 0 || st.Failed != 3 || st.P99Ms != 0 {
		t.Errorf("start during redis_sigstop = %+v, want 3 calls, all failed, no latency", st)
	}
	if _, ok := got["redis_sigstop"]["complete"]; ok {
		t.Errorf("a call between outages was counted: %+v", got)
	}
	if oc := got["platform_sigkill"]["order-create"]; oc.Calls != 1 || oc.Failed != 1 {
		t.Errorf("order-create during the open platform_sigkill = %+v, want 1 failed call", oc)
	}
}
