package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Fleet is a snapshot of the state the fleet gauges report, read on scrape.
type Fleet struct {
	// AvailableDrivers is the number of drivers in the GEO set of available drivers.
	AvailableDrivers int64
	// OpenRides is the number of rides not yet COMPLETED, CANCELLED or UNMATCHED.
	OpenRides int64
	// OutboxLag is the age of the oldest unpublished outbox row (0 when none waits).
	OutboxLag time.Duration
}

// FleetReader reads a Fleet. When it returns an error the collector reports it to the scrape and
// serves none of the three gauges that time (never zeros in their place).
type FleetReader func(ctx context.Context) (Fleet, error)

var (
	availableDriversDesc = prometheus.NewDesc("flagdown_available_drivers",
		"Drivers available for offers (the GEO set's size), by city.", []string{"city"}, nil)
	openRidesDesc = prometheus.NewDesc("flagdown_open_rides",
		"Rides REQUESTED, ACCEPTED or IN_PROGRESS, by city.", []string{"city"}, nil)
	outboxLagDesc = prometheus.NewDesc("flagdown_outbox_lag_seconds",
		"Age of the oldest unpublished outbox row (0 when none waits).", nil, nil)
)

// FleetCollector collects the fleet gauges (flagdown_available_drivers, flagdown_open_rides,
// flagdown_outbox_lag_seconds) on scrape by calling read with timeout. A long-running process
// (flagdown dev) registers it on its own registry, never a per-call function.
type FleetCollector struct {
	read    FleetReader
	timeout time.Duration
}

// NewFleetCollector returns a FleetCollector over read; each scrape gives read at most timeout.
func NewFleetCollector(read FleetReader, timeout time.Duration) *FleetCollector {
	return &FleetCollector{read: read, timeout: timeout}
}

// Describe sends the fleet gauges' descriptions.
func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- availableDriversDesc
	ch <- openRidesDesc
	ch <- outboxLagDesc
}

// Collect reads the fleet and sends the gauges, or an invalid metric (reported by the scrape) when
// the read fails.
func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	f, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(availableDriversDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(availableDriversDesc, prometheus.GaugeValue, float64(f.AvailableDrivers), City)
	ch <- prometheus.MustNewConstMetric(openRidesDesc, prometheus.GaugeValue, float64(f.OpenRides), City)
	ch <- prometheus.MustNewConstMetric(outboxLagDesc, prometheus.GaugeValue, f.OutboxLag.Seconds())
}
