package broker_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// ingress stands in for a Knative Broker's ingress (a third-party HTTP endpoint we cannot run
// here): it takes CloudEvents over HTTP and answers 202 Accepted, or status when set.
type ingress struct {
	status atomic.Int32
	got    atomic.Value // http.Header of the last request
}

func (in *ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.got.Store(r.Header.Clone())
	if s := in.status.Load(); s != 0 {
		w.WriteHeader(int(s))
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

func TestHTTPSinkSendsBinaryMode(t *testing.T) {
	in := &ingress{}
	srv := httptest.NewServer(in)
	defer srv.Close()
	publish, err := broker.HTTPSink(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, err := cloudevent.New("id-1", events.RideRequested, "/flagdown/order-create", "ride-1", map[string]string{"ride_id": "ride-1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(context.Background(), e); err != nil {
		t.Fatalf("publish: %v", err)
	}
	h := in.got.Load().(http.Header)
	for k, want := range map[string]string{"Ce-Id": "id-1", "Ce-Type": events.RideRequested, "Ce-Subject": "ride-1", "Ce-Specversion": "1.0"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}

	in.status.Store(http.StatusServiceUnavailable)
	err = publish(context.Background(), e)
	if dispatch.ErrorCode(err) != dispatch.CodeUnavailable {
		t.Fatalf("publish to a failing sink: %v, want an unavailable error", err)
	}
}
