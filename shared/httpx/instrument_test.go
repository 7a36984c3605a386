package httpx_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/metrics"
)

// TestInstrumentCountsByFunctionAndStatus: requests through Instrument are counted and timed under
// the function's name and the status the handler wrote, and /metrics (metrics.Handler) serves them.
func TestInstrumentCountsByFunctionAndStatus(t *testing.T) {
	h := httpx.Instrument("instrument-test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.Serve(w, r, nil, http.MethodPost, func() (int, any, error) {
			if r.URL.Query().Get("fail") != "" {
				return 0, nil, dispatch.Conflict(dispatch.ReasonRideTaken, "taken")
			}
			return http.StatusCreated, map[string]string{"ok": "yes"}, nil
		})
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, u := range []string{"/", "/", "/?fail=1"} {
		resp, err := http.Post(srv.URL+u, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL) // GET: 405 from Serve
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	for code, want := range map[string]float64{"201": 2, "409": 1, "405": 1} {
		if got := testutil.ToFloat64(metrics.HTTPRequests.WithLabelValues("instrument-test", code)); got != want {
			t.Errorf("requests{code=%s} = %v, want %v", code, got, want)
		}
	}

	m := httptest.NewServer(metrics.Handler())
	defer m.Close()
	mresp, err := http.Get(m.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, line := range []string{
		`flagdown_http_requests_total{code="201",function="instrument-test"} 2`,
		`flagdown_http_requests_total{code="409",function="instrument-test"} 1`,
		`flagdown_http_request_duration_seconds_count{code="201",function="instrument-test"} 2`,
	} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}
