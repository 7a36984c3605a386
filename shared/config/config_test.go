package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/config"
)

func TestDefaults(t *testing.T) {
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.OfferWindow, 15*time.Second; got != want {
		t.Errorf("OfferWindow = %v, want %v", got, want)
	}
	if got, want := len(c.SearchRadiiM), 6; got != want {
		t.Errorf("len(SearchRadiiM) = %d, want %d", got, want)
	}
	if got, want := c.ServiceArea, []float64{40.40, -74.40, 41.10, -73.50}; len(got) != 4 || got[0] != want[0] || got[3] != want[3] {
		t.Errorf("ServiceArea = %v, want %v", got, want)
	}
}

func TestFromEnvOverrides(t *testing.T) {
	c, err := config.FromEnv(map[string]string{
		"FLAGDOWN_OFFER_WINDOW": "20s", "FLAGDOWN_SEARCH_RADII_M": "300,900", "REDIS_URL": "redis://example:6380/2",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.OfferWindow != 20*time.Second || len(c.SearchRadiiM) != 2 || c.SearchRadiiM[1] != 900 || c.RedisURL != "redis://example:6380/2" {
		t.Errorf("overrides not applied: %+v", c)
	}
}

func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"RadiiNotIncreasing": {map[string]string{"FLAGDOWN_SEARCH_RADII_M": "1000,500"}, "FLAGDOWN_SEARCH_RADII_M"},
		"AreaInverted":       {map[string]string{"FLAGDOWN_SERVICE_AREA": "41,-73,40,-74"}, "FLAGDOWN_SERVICE_AREA"},
		"AreaShort":          {map[string]string{"FLAGDOWN_SERVICE_AREA": "41,-73"}, "FLAGDOWN_SERVICE_AREA"},
		"OfferWindowTiny":    {map[string]string{"FLAGDOWN_OFFER_WINDOW": "10ms"}, "FLAGDOWN_OFFER_WINDOW"},
		"NotADuration":       {map[string]string{"FLAGDOWN_HEARTBEAT_TTL": "soon"}, "FLAGDOWN_HEARTBEAT_TTL"},
		"RetryCapBelowBase":  {map[string]string{"FLAGDOWN_RETRY_BASE": "30s", "FLAGDOWN_RETRY_MAX_WAIT": "5s"}, "FLAGDOWN_RETRY_BASE"},
		"NoRetries":          {map[string]string{"FLAGDOWN_RETRY_MAX_ATTEMPTS": "0"}, "FLAGDOWN_RETRY_MAX_ATTEMPTS"},
		"SweepZero":          {map[string]string{"FLAGDOWN_EXPIRY_SWEEP_INTERVAL": "0s"}, "FLAGDOWN_EXPIRY_SWEEP_INTERVAL"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.FromEnv(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
