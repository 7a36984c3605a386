package function

import (
	"context"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/push"
)

// OfferPushTimeout bounds the push of a new offer to the driver's live connections right after it
// was recorded.
const OfferPushTimeout = time.Second

// pushOffer pushes the offer just recorded to its driver's live connections: the fast path, one
// outbox → broker round trip ahead of the notify function, which pushes the same message (same id:
// the app drops the repeat) from ride.offered and is the path that survives a crash here. Failures
// are logged, never returned: the offer stands either way.
func (f *Function) pushOffer(ctx context.Context, o dispatch.LiveOffer, driverID string) {
	p := f.d.Push()
	if !p.Enabled() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), OfferPushTimeout)
	defer cancel()
	if _, err := p.Send(ctx, push.User{Role: auth.RoleDriver, ID: driverID}, push.OfferMessage(o, time.Now())); err != nil {
		f.d.Log.Debug("push offer (notify will retry from ride.offered)", "ride_id", o.RideID, "driver_id", driverID, "err", err)
	}
}
