package function

import (
	"context"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/push"
)

// OfferPushTimeout bounds the push of a new offer to the driver's live connections right after it
// was recorded.
const OfferPushTimeout = time.Second

// MaxOfferPushesInFlight bounds the fast offer pushes running at once in a process; past it a new
// offer is left to the notify function (ride.offered), which pushes the same message.
const MaxOfferPushesInFlight = 64

// pushOffer starts the push of the offer just recorded to its driver's live connections and returns
// at once: the match answers (and its trigger worker takes the next ride) without waiting for a
// socket. It is the fast path, one outbox → broker round trip ahead of the notify function, which
// pushes the same message (same id: the app drops the repeat) from ride.offered and is the path
// that survives a crash or a skipped push here. Failures are logged, never returned: the offer
// stands either way.
func (f *Function) pushOffer(ctx context.Context, o dispatch.LiveOffer, driverID string) {
	p := f.d.Push()
	if !p.Enabled() {
		return
	}
	select {
	case f.offerPushes <- struct{}{}:
	default:
		metrics.PushMessages.WithLabelValues("skipped").Inc()
		f.d.Log.Debug("push offer skipped: too many in flight (notify pushes it from ride.offered)", "ride_id", o.RideID, "driver_id", driverID)
		return
	}
	offeredAt := time.Now()
	go func() {
		defer func() { <-f.offerPushes }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), OfferPushTimeout)
		defer cancel()
		if _, err := p.Send(ctx, push.User{Role: auth.RoleDriver, ID: driverID}, push.OfferMessage(o, offeredAt)); err != nil {
			f.d.Log.Debug("push offer (notify will retry from ride.offered)", "ride_id", o.RideID, "driver_id", driverID, "err", err)
		}
	}()
}
