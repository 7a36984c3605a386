package config_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

func TestDefaults(t *testing.T) {
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.OfferWindow, 15*time.Second; got != want {
		t.Errorf("OfferWindow = %v, want %v", got, want)
	}
	if c.SurgeMode != "shadow" || c.SurgeFloor != 1 || c.SurgeCeiling != 3 || c.SurgeMaxStep != 0.25 || c.SurgeEmergency || c.SurgeEmergencyCap != 1 ||
		c.SurgeWindow != 5*time.Minute || c.SurgeUpdateInterval != 30*time.Second {
		t.Errorf("surge defaults: mode %s floor %v ceiling %v step %v emergency %v cap %v window %v interval %v", c.SurgeMode, c.SurgeFloor,
			c.SurgeCeiling, c.SurgeMaxStep, c.SurgeEmergency, c.SurgeEmergencyCap, c.SurgeWindow, c.SurgeUpdateInterval)
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

// TestLogSettings: JSON at info by default; FLAGDOWN_LOG_FORMAT and FLAGDOWN_LOG_LEVEL override them.
func TestLogSettings(t *testing.T) {
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c.LogFormat != "json" || c.LogLevel != slog.LevelInfo {
		t.Errorf("defaults: format %q level %v; want json, INFO", c.LogFormat, c.LogLevel)
	}
	c, err = config.FromEnv(map[string]string{"FLAGDOWN_LOG_FORMAT": "text", "FLAGDOWN_LOG_LEVEL": "debug"})
	if err != nil {
		t.Fatal(err)
	}
	if c.LogFormat != "text" || c.LogLevel != slog.LevelDebug {
		t.Errorf("overrides: format %q level %v; want text, DEBUG", c.LogFormat, c.LogLevel)
	}
}

// testSigningKey is a FLAGDOWN_EVENT_SIGNING_KEY (key id k1, a seed of 32 zero bytes).
const testSigningKey = "k1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// TestInternalCredentials: the event keys and the token parse, and the maximum event age defaults
// to the broker stream's retention.
func TestInternalCredentials(t *testing.T) {
	c, err := config.FromEnv(map[string]string{
		"FLAGDOWN_EVENT_SIGNING_KEY": testSigningKey,
		"FLAGDOWN_EVENT_VERIFY_KEYS": "k1:O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik, k0:O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik",
		"FLAGDOWN_INTERNAL_TOKEN":    "0123456789abcdef0123456789abcdef",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.EventMaxAge != broker.Retention {
		t.Errorf("FLAGDOWN_EVENT_MAX_AGE default %s, want the stream retention %s", c.EventMaxAge, broker.Retention)
	}
	if minAge, retention := internalauth.MinMaxAge, broker.Retention; minAge != retention {
		t.Errorf("internalauth.MinMaxAge %s differs from the stream retention %s", minAge, retention)
	}
}

func TestRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want string
	}{
		"JWKSOverHTTP":           {map[string]string{"FLAGDOWN_JWKS_URL": "http://idp.example.com/jwks.json"}, "FLAGDOWN_JWKS_URL"},
		"RadiiNotIncreasing":     {map[string]string{"FLAGDOWN_SEARCH_RADII_M": "1000,500"}, "FLAGDOWN_SEARCH_RADII_M"},
		"AreaInverted":           {map[string]string{"FLAGDOWN_SERVICE_AREA": "41,-73,40,-74"}, "FLAGDOWN_SERVICE_AREA"},
		"AreaShort":              {map[string]string{"FLAGDOWN_SERVICE_AREA": "41,-73"}, "FLAGDOWN_SERVICE_AREA"},
		"OfferWindowTiny":        {map[string]string{"FLAGDOWN_OFFER_WINDOW": "10ms"}, "FLAGDOWN_OFFER_WINDOW"},
		"NotADuration":           {map[string]string{"FLAGDOWN_HEARTBEAT_TTL": "soon"}, "FLAGDOWN_HEARTBEAT_TTL"},
		"RetryCapBelowBase":      {map[string]string{"FLAGDOWN_RETRY_BASE": "30s", "FLAGDOWN_RETRY_MAX_WAIT": "5s"}, "FLAGDOWN_RETRY_BASE"},
		"NoRetries":              {map[string]string{"FLAGDOWN_RETRY_MAX_ATTEMPTS": "0"}, "FLAGDOWN_RETRY_MAX_ATTEMPTS"},
		"SweepZero":              {map[string]string{"FLAGDOWN_EXPIRY_SWEEP_INTERVAL": "0s"}, "FLAGDOWN_EXPIRY_SWEEP_INTERVAL"},
		"SkewEqualsHeartbeat":    {map[string]string{"FLAGDOWN_MAX_CLOCK_SKEW": "30s", "FLAGDOWN_HEARTBEAT_TTL": "30s"}, "FLAGDOWN_MAX_CLOCK_SKEW"},
		"SkewAboveHeartbeat":     {map[string]string{"FLAGDOWN_MAX_CLOCK_SKEW": "45s"}, "FLAGDOWN_HEARTBEAT_TTL"},
		"RetainEventsZero":       {map[string]string{"FLAGDOWN_RETAIN_PROCESSED_EVENTS": "0s"}, "FLAGDOWN_RETAIN_PROCESSED_EVENTS"},
		"RetainEventsShort":      {map[string]string{"FLAGDOWN_RETAIN_PROCESSED_EVENTS": "59m"}, "FLAGDOWN_RETAIN_PROCESSED_EVENTS"},
		"RetainOutboxZero":       {map[string]string{"FLAGDOWN_RETAIN_OUTBOX": "0s"}, "FLAGDOWN_RETAIN_OUTBOX"},
		"RetainOffersNegative":   {map[string]string{"FLAGDOWN_RETAIN_OFFERS": "-1h"}, "FLAGDOWN_RETAIN_OFFERS"},
		"DriverStateAtHeartbeat": {map[string]string{"FLAGDOWN_DRIVER_STATE_TTL": "30s"}, "FLAGDOWN_DRIVER_STATE_TTL"},
		"SNSAppNotAnARN":         {map[string]string{"FLAGDOWN_SNS_APP_ARN_FCM": "flagdown-android"}, "FLAGDOWN_SNS_APP_ARN_FCM"},
		"SNSAppWrongPlatform":    {map[string]string{"FLAGDOWN_SNS_APP_ARN_APNS": "arn:aws:sns:us-east-1:123456789012:app/APNS_SANDBOX/flagdown"}, "FLAGDOWN_SNS_APP_ARN_APNS"},
		"SNSAppsTwoRegions": {map[string]string{"FLAGDOWN_SNS_APP_ARN_FCM": "arn:aws:sns:us-east-1:123456789012:app/GCM/flagdown",
			"FLAGDOWN_SNS_APP_ARN_APNS": "arn:aws:sns:eu-west-1:123456789012:app/APNS/flagdown"}, "one region"},
		"SNSEndpointNotURL":            {map[string]string{"FLAGDOWN_SNS_ENDPOINT": "localhost:4566"}, "FLAGDOWN_SNS_ENDPOINT"},
		"PushEndpointNotURL":           {map[string]string{"FLAGDOWN_PUSH_ENDPOINT": "abc.execute-api.eu-west-3.amazonaws.com/prod"}, "FLAGDOWN_PUSH_ENDPOINT"},
		"LogFormatUnknown":             {map[string]string{"FLAGDOWN_LOG_FORMAT": "logfmt"}, "FLAGDOWN_LOG_FORMAT"},
		"LogLevelUnknown":              {map[string]string{"FLAGDOWN_LOG_LEVEL": "loud"}, "FLAGDOWN_LOG_LEVEL"},
		"SurgeModeUnknown":             {map[string]string{"FLAGDOWN_SURGE_MODE": "max"}, "FLAGDOWN_SURGE_MODE"},
		"SurgeWindowShort":             {map[string]string{"FLAGDOWN_SURGE_WINDOW": "30s"}, "FLAGDOWN_SURGE_WINDOW"},
		"SurgeIntervalTiny":            {map[string]string{"FLAGDOWN_SURGE_UPDATE_INTERVAL": "100ms"}, "FLAGDOWN_SURGE_UPDATE_INTERVAL"},
		"SurgeFloorBelowOne":           {map[string]string{"FLAGDOWN_SURGE_FLOOR": "0.9"}, "FLAGDOWN_SURGE_FLOOR"},
		"SurgeFloorNaN":                {map[string]string{"FLAGDOWN_SURGE_FLOOR": "NaN"}, "FLAGDOWN_SURGE_FLOOR"},
		"SurgeCeilingLow":              {map[string]string{"FLAGDOWN_SURGE_FLOOR": "1.5", "FLAGDOWN_SURGE_CEILING": "1.2"}, "FLAGDOWN_SURGE_CEILING"},
		"SurgeCeilingHuge":             {map[string]string{"FLAGDOWN_SURGE_CEILING": "101"}, "FLAGDOWN_SURGE_CEILING"},
		"SurgeStepZero":                {map[string]string{"FLAGDOWN_SURGE_MAX_STEP": "0"}, "FLAGDOWN_SURGE_MAX_STEP"},
		"SurgeCapBelowOne":             {map[string]string{"FLAGDOWN_SURGE_EMERGENCY_CAP": "0.5"}, "FLAGDOWN_SURGE_EMERGENCY_CAP"},
		"SurgeEmergencyWord":           {map[string]string{"FLAGDOWN_SURGE_EMERGENCY": "maybe"}, "FLAGDOWN_SURGE_EMERGENCY"},
		"EventMaxAgeShort":             {map[string]string{"FLAGDOWN_EVENT_MAX_AGE": "24h"}, "FLAGDOWN_EVENT_MAX_AGE"},
		"EventMaxAgeOutlivesProcessed": {map[string]string{"FLAGDOWN_EVENT_MAX_AGE": "720h"}, "FLAGDOWN_RETAIN_PROCESSED_EVENTS"},
		"SigningKeyMalformed":          {map[string]string{"FLAGDOWN_EVENT_SIGNING_KEY": "k1:short"}, "FLAGDOWN_EVENT_SIGNING_KEY"},
		"VerifyKeysMalformed":          {map[string]string{"FLAGDOWN_EVENT_VERIFY_KEYS": "k1"}, "FLAGDOWN_EVENT_VERIFY_KEYS"},
		"TokenShort":                   {map[string]string{"FLAGDOWN_INTERNAL_TOKEN": "0123456789abcdef"}, "FLAGDOWN_INTERNAL_TOKEN"},
		"TokenIsTheSigningKey":         {map[string]string{"FLAGDOWN_EVENT_SIGNING_KEY": testSigningKey, "FLAGDOWN_INTERNAL_TOKEN": testSigningKey}, "different secret"},
		"TokenIsTheSigningSeed":        {map[string]string{"FLAGDOWN_EVENT_SIGNING_KEY": testSigningKey, "FLAGDOWN_INTERNAL_TOKEN": testSigningKey[3:]}, "different secret"},
		"OldInternalSecret":            {map[string]string{"FLAGDOWN_INTERNAL_SECRET": "0123456789abcdef0123456789abcdef"}, "FLAGDOWN_EVENT_SIGNING_KEY"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := config.FromEnv(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestClockSkewBelowHeartbeat: the skew must be strictly shorter than the heartbeat, and the error
// names both variables (the rule concerns the pair, either may be the one to change).
func TestClockSkewBelowHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		skew, hb string
		ok       bool
	}{
		{"29s", "30s", true},
		{"30s", "30s", false},
		{"10s", "5s", false},
		{"5s", "1m", true},
	} {
		c, err := config.FromEnv(map[string]string{"FLAGDOWN_MAX_CLOCK_SKEW": tc.skew, "FLAGDOWN_HEARTBEAT_TTL": tc.hb})
		switch {
		case tc.ok && err != nil:
			t.Errorf("skew %s, heartbeat %s: %v", tc.skew, tc.hb, err)
		case tc.ok && c.MaxClockSkew >= c.HeartbeatTTL:
			t.Errorf("skew %s, heartbeat %s: parsed %v, %v", tc.skew, tc.hb, c.MaxClockSkew, c.HeartbeatTTL)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "FLAGDOWN_MAX_CLOCK_SKEW") || !strings.Contains(err.Error(), "FLAGDOWN_HEARTBEAT_TTL")):
			t.Errorf("skew %s, heartbeat %s: got %v, want an error naming both variables", tc.skew, tc.hb, err)
		}
	}
}

func TestRetentionDefaultsAndOverrides(t *testing.T) {
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c.RetainProcessedEvents != 192*time.Hour || c.RetainOutbox != 72*time.Hour || c.RetainOffers != 720*time.Hour || c.DriverStateTTL != 24*time.Hour {
		t.Errorf("retention defaults: processed_events %v, outbox %v, offers %v, driver state %v",
			c.RetainProcessedEvents, c.RetainOutbox, c.RetainOffers, c.DriverStateTTL)
	}
	if c.MaxClockSkew >= c.HeartbeatTTL {
		t.Errorf("default skew %v is not below the default heartbeat %v", c.MaxClockSkew, c.HeartbeatTTL)
	}
	c, err = config.FromEnv(map[string]string{
		"FLAGDOWN_RETAIN_PROCESSED_EVENTS": "200h", "FLAGDOWN_RETAIN_OUTBOX": "90m", "FLAGDOWN_RETAIN_OFFERS": "48h",
		"FLAGDOWN_DRIVER_STATE_TTL": "31s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.RetainProcessedEvents != 200*time.Hour || c.RetainOutbox != 90*time.Minute || c.RetainOffers != 48*time.Hour || c.DriverStateTTL != 31*time.Second {
		t.Errorf("retention overrides not applied: %v %v %v %v", c.RetainProcessedEvents, c.RetainOutbox, c.RetainOffers, c.DriverStateTTL)
	}
}

// TestSNSApps: the three platform application ARNs and the endpoint are read as set; none is required.
func TestSNSApps(t *testing.T) {
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c.SNSAppARNFCM != "" || c.SNSAppARNAPNS != "" || c.SNSAppARNAPNSSandbox != "" || c.SNSEndpoint != "" {
		t.Errorf("SNS defaults = %q %q %q %q, want all empty (push fallback off)", c.SNSAppARNFCM, c.SNSAppARNAPNS, c.SNSAppARNAPNSSandbox, c.SNSEndpoint)
	}
	env := map[string]string{
		"FLAGDOWN_SNS_APP_ARN_FCM":          "arn:aws:sns:us-east-1:123456789012:app/GCM/flagdown-android",
		"FLAGDOWN_SNS_APP_ARN_APNS":         "arn:aws:sns:us-east-1:123456789012:app/APNS/flagdown-ios",
		"FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX": "arn:aws:sns:us-east-1:123456789012:app/APNS_SANDBOX/flagdown-ios-dev",
		"FLAGDOWN_SNS_ENDPOINT":             "http://127.0.0.1:4566",
	}
	c, err = config.FromEnv(env)
	if err != nil {
		t.Fatal(err)
	}
	if c.SNSAppARNFCM != env["FLAGDOWN_SNS_APP_ARN_FCM"] || c.SNSAppARNAPNS != env["FLAGDOWN_SNS_APP_ARN_APNS"] ||
		c.SNSAppARNAPNSSandbox != env["FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX"] || c.SNSEndpoint != env["FLAGDOWN_SNS_ENDPOINT"] {
		t.Errorf("SNS config = %q %q %q %q, want the environment's", c.SNSAppARNFCM, c.SNSAppARNAPNS, c.SNSAppARNAPNSSandbox, c.SNSEndpoint)
	}
}

// TestDefaultsAllowTheSendRulesQuietStretch: a driver app under the seed's send rule sends nothing
// for up to 15 s while stationary or carrying (16 s on a 4 s tick): the default heartbeat and
// hail freshness outlast that with slack, and the offline brake counts a driver as lapsing only
// once he has been silent for longer (half a TTL).
func TestDefaultsAllowTheSendRulesQuietStretch(t *testing.T) {
	const quiet, slack = 15 * time.Second, 5 * time.Second
	c, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatTTL < quiet+slack || c.HailPingMaxAge < quiet+slack {
		t.Errorf("FLAGDOWN_HEARTBEAT_TTL %s, FLAGDOWN_HAIL_PING_MAX_AGE %s: want both at least %s", c.HeartbeatTTL, c.HailPingMaxAge, quiet+slack)
	}
	if c.HeartbeatTTL/2 < quiet {
		t.Errorf("half of FLAGDOWN_HEARTBEAT_TTL (%s) is shorter than the send rule's %s: the offline brake would count stationary drivers as lapsing", c.HeartbeatTTL/2, quiet)
	}
}
