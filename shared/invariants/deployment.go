package invariants

import (
	"context"
	"time"

	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// CheckDeployment is CheckWith on the deployment cfg describes (`flagdown verify`, and the replay's
// check at its end): grace, cfg's pickup deadline and trip ceiling, and, when cfg.NATSURL is set,
// the broker's streams, looked up without creating or changing them, so that DeadLetteredEvents
// and ConsumerLag are judged. Without NATS_URL, or with a broker it cannot reach, those two are
// reported not checked and Report.NotCheckedWhy says why.
func CheckDeployment(ctx context.Context, cfg *config.Config, db *pgstore.DB, rs *redisstore.Store, grace time.Duration) (Report, error) {
	opt := Options{Grace: grace, PickupDeadline: cfg.PickupDeadline, TripCeiling: cfg.TripCeiling}
	why := "NATS_URL is not set"
	if cfg.NATSURL != "" {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		b, err := broker.Connect(bctx, cfg.NATSURL, cfg.NATSStream, cfg.SubjectPrefix,
			broker.WithCredentials(broker.ConfigCredentials(cfg)), broker.ExistingStreams())
		cancel()
		if err != nil {
			why = "broker not reachable: " + err.Error()
		} else {
			defer b.Close()
			opt.Broker = b
		}
	}
	rep, err := CheckWith(ctx, db, rs, opt)
	if err != nil {
		return Report{}, err
	}
	if opt.Broker == nil {
		rep.NotCheckedWhy = why
	}
	return rep, nil
}
