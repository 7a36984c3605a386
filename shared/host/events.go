package host

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flagdown/flagdown/shared/cloudevent"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/httpx"
	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/tracing"
)

// EventFunc handles one decoded, validated CloudEvent and returns a short outcome for the answer
// body (e.g. "offered", "duplicate"). It must be idempotent on (source, id).
type EventFunc func(ctx context.Context, e event.Event) (string, error)

// EventHandler is the HTTP edge of the function called function, triggered by events: it decodes
// the request (CloudEvents binary or structured mode), refuses an event without a valid signature
// of an accepted key or older than the maximum age (d.EventVerifier().Verify: 401 unauthenticated,
// logged and counted in metrics.EventsRefused by reason; 503 when no FLAGDOWN_EVENT_VERIFY_KEYS are
// configured) before fn can record anything in processed_events, rejects types outside accepts
// with 400, calls fn in a "process <type>" span that continues the trace of the event's
// traceparent (tracing.StartProcess) and answers 200 {"outcome": ...}. Errors map through the one
// status table, so a trigger retries 5xx (unavailable, internal) and dead-letters 4xx, a forged
// event at once.
func EventHandler(d *Deps, function string, accepts []string, fn EventFunc) http.Handler {
	ok := map[string]bool{}
	for _, t := range accepts {
		ok[t] = true
	}
	list := append([]string(nil), accepts...)
	sort.Strings(list)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			httpx.MethodNotAllowed(w, http.MethodPost)
			return
		}
		e, err := cloudevent.FromRequestLimit(r, d.Config.MaxBodyBytes)
		if err != nil {
			httpx.WriteError(w, r, d.Log, err)
			return
		}
		if err := d.EventVerifier().Verify(e); err != nil {
			reason := dispatch.AsError(err).Reason
			if reason == "" {
				reason = "not_configured"
			}
			metrics.EventsRefused.WithLabelValues(function, reason).Inc()
			d.Log.Warn("internal event refused", "id", e.ID(), "type", e.Type(), "source", e.Source(),
				logging.EventSubject(e.Type(), e.Subject()), "reason", reason, "err", err)
			httpx.WriteError(w, r, d.Log, err)
			return
		}
		if !ok[e.Type()] {
			httpx.WriteError(w, r, d.Log, dispatch.Invalid("type", fmt.Sprintf("must be one of %s for this function", strings.Join(list, ", "))))
			return
		}
		ctx, span := tracing.StartProcess(r.Context(), function, e)
		outcome, err := fn(ctx, e)
		if span.IsRecording() {
			span.SetAttributes(tracing.OutcomeKey.String(outcome))
		}
		tracing.End(span, err)
		if err != nil {
			httpx.WriteError(w, r, d.Log, err)
			return
		}
		httpx.WriteJSON(w, http.StatusOK, map[string]string{"id": e.ID(), "type": e.Type(), "outcome": outcome})
	})
}
