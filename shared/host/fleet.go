package host

import (
	"context"
	"errors"

	"github.com/flagdown/flagdown/shared/metrics"
)

// Fleet reads the fleet gauges' state (metrics.FleetReader): the GEO set's size from Redis, the
// open rides and the outbox lag from PostgreSQL. Each read is cheap (ZCARD, one count, one indexed
// row); ctx bounds them all.
func (d *Deps) Fleet(ctx context.Context) (metrics.Fleet, error) {
	var f metrics.Fleet
	var errD, errR, errL error
	f.AvailableDrivers, errD = d.Redis.AvailableDrivers(ctx)
	f.OpenRides, errR = d.DB.OpenRides(ctx)
	f.OutboxLag, errL = d.DB.OutboxLag(ctx)
	return f, errors.Join(errD, errR, errL)
}
