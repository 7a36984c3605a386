package config

import "github.com/flagdown/flagdown/shared/dispatch"

// Rules returns the dispatch rules of this configuration (dispatch.Rules): the service area, offer
// window, retry policy, batch window, street-hail pairing and fare parameters. Call it on a
// configuration that passed Validate (Load and FromEnv validate): the composition root builds the
// value once per process and hands it to the services that decide (shared/lifecycle).
func (c *Config) Rules() dispatch.Rules {
	var area dispatch.Area
	if len(c.ServiceArea) == 4 {
		a := c.ServiceArea
		area = dispatch.Area{MinLat: a[0], MinLng: a[1], MaxLat: a[2], MaxLng: a[3]}
	}
	return dispatch.Rules{
		ServiceArea: area,
		OfferWindow: c.OfferWindow,
		RetryBase:   c.RetryBase, RetryMaxWait: c.RetryMaxWait, RetryMaxAttempts: c.RetryMaxAttempts,
		RetryBudget:    c.RetryBudget,
		PickupDeadline: c.PickupDeadline, TripCeiling: c.TripCeiling,
		BatchWindow: c.BatchWindow,
		SimSpeedup:  c.SimSpeedup,
		Hail: dispatch.HailRules{Window: c.HailWindow, RadiusM: c.HailRadiusM, PingMaxAge: c.HailPingMaxAge,
			GPSSlackM: c.HailGPSSlackM, CodeMaxWrong: c.HailCodeMaxWrong, CodeLockout: c.HailCodeLockout},
		Fare: dispatch.FareParams{BaseCents: c.FareBaseCents, PerKmCents: c.FarePerKmCents, PerMinCents: c.FarePerMinCents,
			MinimumCents: c.FareMinimumCents, RoadFactor: c.RoadFactor, AvgSpeedMPS: c.AvgSpeedMPS},
	}
}
