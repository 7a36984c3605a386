package broker

import (
	"context"
	"fmt"
	"net/http"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// PublishFunc publishes one CloudEvent; Broker.Publish and HTTPSink's result have this shape.
type PublishFunc func(ctx context.Context, e event.Event) error

// HTTPSink returns a PublishFunc that POSTs each event in CloudEvents HTTP binary mode to url: a
// Knative Broker's ingress, which a SinkBinding hands to a Deployment as K_SINK. Any 2xx answer
// (the Broker answers 202 Accepted) is success; anything else is a CodeUnavailable error, so the
// caller (the outbox relay, the expiry source) retries. hc may be nil (a client with a 10 s timeout).
func HTTPSink(url string, hc *http.Client) (PublishFunc, error) {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	p, err := cehttp.New(cehttp.WithTarget(url), cehttp.WithClient(*hc))
	if err != nil {
		return nil, fmt.Errorf("broker: sink %s: %w", url, err)
	}
	c, err := cloudevents.NewClient(p, cloudevents.WithTimeNow())
	if err != nil {
		return nil, fmt.Errorf("broker: sink %s: %w", url, err)
	}
	return func(ctx context.Context, e event.Event) error {
		ctx = cloudevents.WithEncodingBinary(ctx)
		if res := c.Send(ctx, e); !cloudevents.IsACK(res) {
			return dispatch.Unavailable("event sink", fmt.Errorf("broker: send %s %s to %s: %w", e.Type(), e.ID(), url, res))
		}
		return nil
	}, nil
}
