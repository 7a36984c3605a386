// Package config reads flagdown's configuration from environment variables into one struct.
// Every variable is listed in the configuration table of docs/configuration.md; durations use Go syntax (15s, 500ms).
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/logging"
)

// Config is the whole configuration of a flagdown process.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (source of truth: rides, offers, outbox).
	DatabaseURL string `env:"DATABASE_URL" envDefault:"postgres://postgres@127.0.0.1:5432/flagdown?sslmode=disable"`
	// DatabaseSchema, when set, is the schema flagdown's tables live in (search_path); tests use one each.
	DatabaseSchema string `env:"FLAGDOWN_DB_SCHEMA"`
	// RedisURL is the Redis connection URL (GEO index, heartbeats, driver state, offer locks): one server
	// (redis://), a primary followed through Sentinel (redis+sentinel://host:port,host2:port2/mastername)
	// or a Redis Cluster (redis+cluster://host:port?addr=host2:port2), see redisstore.Open.
	RedisURL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	// RedisTimeout is the deadline of the Redis work of a request whose decision PostgreSQL makes
	// (the effects applied after a commit, a ride's live position, the rate limit and price of
	// order-create), which degrades instead of failing when Redis does not answer in time
	// (docs/resilience.md); the client's socket timeouts are this or redisstore.MinSocketTimeout
	// (3 s), whichever is longer. 10ms..10s.
	RedisTimeout time.Duration `env:"FLAGDOWN_REDIS_TIMEOUT" envDefault:"500ms"`
	// RedisPrefix is prepended to every Redis key flagdown writes, so several deployments or tests share a
	// server; on a Redis Cluster it carries the city's hash tag, e.g. "flagdown:{nyc}:" (redisstore.CheckPrefix).
	RedisPrefix string `env:"FLAGDOWN_REDIS_PREFIX" envDefault:"flagdown:"`
	// NATSURL is the broker's URL; empty means flagdown dev starts an embedded NATS JetStream server.
	NATSURL string `env:"NATS_URL"`
	// EventSink is a CloudEvents HTTP endpoint the relay and the expiry source publish to instead of
	// NATS: a Knative Broker's ingress, set by a SinkBinding.
	EventSink string `env:"K_SINK"`
	// NATSStream is the JetStream stream flagdown's events are published to.
	NATSStream string `env:"FLAGDOWN_NATS_STREAM" envDefault:"FLAGDOWN"`
	// SubjectPrefix is the NATS subject prefix; an event of type T is published on <prefix>.<T>.
	SubjectPrefix string `env:"FLAGDOWN_SUBJECT_PREFIX" envDefault:"flagdown.events"`
	// NATSUser and NATSPassword authenticate to NATS as a user of the server's authorization block
	// (deploy/nats/authorization.conf: only the relay's and the expiry source's users may publish
	// events; a trigger's may only consume and acknowledge). The password is a credential: the
	// secret file flagdown-nats-password in a deployment (SecretVars). Empty: no user.
	NATSUser     string `env:"FLAGDOWN_NATS_USER"`
	NATSPassword string `env:"FLAGDOWN_NATS_PASSWORD"`
	// NATSCreds is the path of a NATS credentials file (a user JWT and its nkey seed, made with
	// nsc), the decentralized alternative to NATSUser; empty: none.
	NATSCreds string `env:"FLAGDOWN_NATS_CREDS"`
	// NATSCAFile is the PEM file of the CA the NATS server's TLS certificate must chain to; set (or
	// a tls:// NATS_URL, verified against the system's roots) the connection uses TLS.
	NATSCAFile string `env:"FLAGDOWN_NATS_CA_FILE"`
	// NATSCertFile and NATSKeyFile are a TLS client certificate and its key (PEM) for a server
	// that verifies clients (verify: true, or verify_and_map for users by certificate); both or
	// neither.
	NATSCertFile string `env:"FLAGDOWN_NATS_CERT_FILE"`
	NATSKeyFile  string `env:"FLAGDOWN_NATS_KEY_FILE"`
	// EventSigningKey is the private key the outbox relay and the expiry source sign every event
	// with (shared/internalauth: <key id>:<base64url Ed25519 seed>). Only those two get it; a
	// credential, the secret file flagdown-event-signing-key in a deployment (SecretVars).
	EventSigningKey string `env:"FLAGDOWN_EVENT_SIGNING_KEY"`
	// EventVerifyKeys are the public keys event-triggered functions accept signatures of
	// (<key id>:<base64url Ed25519 public key>, several separated by commas during a rotation); a
	// function without them answers 503 to every event. Not secret, but per deployment, so it comes
	// from the secret file flagdown-event-verify-keys like the credentials (SecretVars).
	EventVerifyKeys string `env:"FLAGDOWN_EVENT_VERIFY_KEYS"`
	// EventMaxAge is the age (event time to now) beyond which a consumer refuses an event, logged
	// and counted (flagdown_events_refused_total{reason="too_old"}); reconcile repairs what it would
	// have done. At least internalauth.MinMaxAge, the broker stream's 7-day retention, and at most
	// RetainProcessedEvents, so that an accepted replay still finds its processed_events row (Validate).
	EventMaxAge time.Duration `env:"FLAGDOWN_EVENT_MAX_AGE" envDefault:"168h"`
	// InternalToken is the bearer token of internal calls that are not events: the reconcile cron
	// sends it, the WebSocket gateway's integrations send it to notify, and reconcile and notify's
	// integration routes refuse calls without it. Several separated by commas during a rotation: the
	// first is sent, every one is accepted. It signs nothing. A credential: the secret file
	// flagdown-internal-token in a deployment (SecretVars).
	InternalToken string `env:"FLAGDOWN_INTERNAL_TOKEN"`

	// HeartbeatTTL is how long a driver counts as online after his last accepted ping (seconds).
	HeartbeatTTL time.Duration `env:"FLAGDOWN_HEARTBEAT_TTL" envDefault:"30s"`
	// OfferWindow is how long a driver has to accept an offer; the offer lock's TTL.
	OfferWindow time.Duration `env:"FLAGDOWN_OFFER_WINDOW" envDefault:"15s"`
	// MaxSpeedMPS is the highest plausible driver speed in metres per second; a ping implying a faster
	// move from the last accepted position is treated as a GPS jump and not applied. 55 m/s ≈ 200 km/h.
	MaxSpeedMPS float64 `env:"FLAGDOWN_MAX_SPEED_MPS" envDefault:"55"`
	// MaxClockSkew is how far in the future a ping timestamp may be before it is rejected. It must be
	// shorter than HeartbeatTTL (Validate): a ping stamped up to this far ahead makes the driver's
	// later, server-stamped pings stale until the clock catches up, and that must not outlast his heartbeat.
	MaxClockSkew time.Duration `env:"FLAGDOWN_MAX_CLOCK_SKEW" envDefault:"10s"`
	// MaxBatch is the largest number of pings one location-update call may carry.
	MaxBatch int `env:"FLAGDOWN_MAX_BATCH" envDefault:"500"`
	// MaxBodyBytes is the largest request body any function reads; larger bodies get 413.
	MaxBodyBytes int64 `env:"FLAGDOWN_MAX_BODY_BYTES" envDefault:"262144"`

	// SearchRadiiM are the match search radii in metres, tried smallest first (expanding radius).
	SearchRadiiM []float64 `env:"FLAGDOWN_SEARCH_RADII_M" envSeparator:"," envDefault:"250,500,1000,2000,4000,8000"`
	// SearchCount is how many nearest drivers one GEOSEARCH returns (bounds query cost per radius).
	SearchCount int `env:"FLAGDOWN_SEARCH_COUNT" envDefault:"10"`
	// MinCandidates: the search widens while fewer eligible drivers than this were found.
	MinCandidates int `env:"FLAGDOWN_MIN_CANDIDATES" envDefault:"3"`
	// ScoreIdleBonusMPerMin: metres of pickup distance forgiven per minute a driver has been idle.
	ScoreIdleBonusMPerMin float64 `env:"FLAGDOWN_SCORE_IDLE_BONUS_M_PER_MIN" envDefault:"50"`
	// ScoreIdleCapMin caps the idle time counted in the score, in minutes.
	ScoreIdleCapMin float64 `env:"FLAGDOWN_SCORE_IDLE_CAP_MIN" envDefault:"20"`
	// ScoreRatingBonusM: metres of pickup distance forgiven per rating star above DefaultRating.
	ScoreRatingBonusM float64 `env:"FLAGDOWN_SCORE_RATING_BONUS_M" envDefault:"300"`
	// DefaultRating is the rating (1..5 stars) assumed for a driver with none recorded.
	DefaultRating float64 `env:"FLAGDOWN_DEFAULT_RATING" envDefault:"4.7"`

	// FareBaseCents is the flag-drop part of the fare estimate, in cents.
	FareBaseCents int64 `env:"FLAGDOWN_FARE_BASE_CENTS" envDefault:"300"`
	// FarePerKmCents is charged per estimated road kilometre, in cents.
	FarePerKmCents int64 `env:"FLAGDOWN_FARE_PER_KM_CENTS" envDefault:"175"`
	// FarePerMinCents is charged per estimated minute of driving, in cents.
	FarePerMinCents int64 `env:"FLAGDOWN_FARE_PER_MIN_CENTS" envDefault:"50"`
	// FareMinimumCents is the lowest fare estimate, in cents.
	FareMinimumCents int64 `env:"FLAGDOWN_FARE_MINIMUM_CENTS" envDefault:"800"`
	// RoadFactor turns straight-line (haversine) distance into an estimated road distance.
	RoadFactor float64 `env:"FLAGDOWN_ROAD_FACTOR" envDefault:"1.3"`
	// AvgSpeedMPS is the average city driving speed used for the duration estimate, metres per second.
	AvgSpeedMPS float64 `env:"FLAGDOWN_AVG_SPEED_MPS" envDefault:"7"`
	// SimSpeedup is how many of the riders' seconds pass per second of the platform's clock: 1 in a
	// real city; a replay's --speedup when `flagdown replay` drives the platform in simulated time
	// (its drivers drive, and its riders wait, that many times faster than the platform's clock
	// runs). The wait estimate is in the riders' seconds (dispatch.RiderSeconds): its match part
	// and the observed request → pickup times its calibration learns from are measured on the
	// platform's clock and multiplied by it; its drive part is seconds of driving already (> 0).
	SimSpeedup float64 `env:"FLAGDOWN_SIM_SPEEDUP" envDefault:"1"`

	// SurgeMode is what surge does (dispatch.SurgeMode): off (nothing computed, 1.0 charged),
	// shadow (computed and logged, 1.0 charged; the default, so surge is watched before it prices
	// anyone) or on (the computed multiplier is charged).
	SurgeMode string `env:"FLAGDOWN_SURGE_MODE" envDefault:"shadow"`
	// SurgeWindow is the sliding window over which a cell's demand (ride requests) is counted.
	SurgeWindow time.Duration `env:"FLAGDOWN_SURGE_WINDOW" envDefault:"5m"`
	// SurgeUpdateInterval is the least time between two updates of a cell's multiplier: each update
	// moves it by at most SurgeMaxStep, so it rises from 1.0 to the ceiling in no less than
	// (ceiling − 1) / step intervals.
	SurgeUpdateInterval time.Duration `env:"FLAGDOWN_SURGE_UPDATE_INTERVAL" envDefault:"30s"`
	// SurgeFloor is the lowest computed multiplier (≥ 1.0: surge never discounts).
	SurgeFloor float64 `env:"FLAGDOWN_SURGE_FLOOR" envDefault:"1.0"`
	// SurgeCeiling is the highest multiplier (≥ SurgeFloor).
	SurgeCeiling float64 `env:"FLAGDOWN_SURGE_CEILING" envDefault:"3.0"`
	// SurgeMaxStep is the most a cell's multiplier moves in one update (> 0).
	SurgeMaxStep float64 `env:"FLAGDOWN_SURGE_MAX_STEP" envDefault:"0.25"`
	// SurgeEmergency declares an emergency (a storm, a transit shutdown): every multiplier is at most
	// SurgeEmergencyCap at once.
	SurgeEmergency bool `env:"FLAGDOWN_SURGE_EMERGENCY" envDefault:"false"`
	// SurgeEmergencyCap is the highest multiplier during a declared emergency (≥ 1.0; 1.0 suspends
	// surge).
	SurgeEmergencyCap float64 `env:"FLAGDOWN_SURGE_EMERGENCY_CAP" envDefault:"1.0"`

	// ServiceArea is the box rides may start and end in: "minLat,minLng,maxLat,maxLng" in WGS84
	// degrees. The default is the New York City metro area (the five boroughs, JFK, LGA, EWR, near NJ).
	ServiceArea []float64 `env:"FLAGDOWN_SERVICE_AREA" envSeparator:"," envDefault:"40.40,-74.40,41.10,-73.50"`
	// NearbyMaxRadiusM caps the radius of the nearby function, metres.
	NearbyMaxRadiusM float64 `env:"FLAGDOWN_NEARBY_MAX_RADIUS_M" envDefault:"5000"`
	// NearbyMaxCount caps the number of drivers the nearby function returns.
	NearbyMaxCount int `env:"FLAGDOWN_NEARBY_MAX_COUNT" envDefault:"50"`
	// HailWindow is how long a street-hail press waits for its counterpart (the entry's TTL): a
	// rider's and a driver's presses pair only within this long of each other (dispatch.HailRules).
	HailWindow time.Duration `env:"FLAGDOWN_HAIL_WINDOW" envDefault:"10s"`
	// HailRadiusM is the largest distance between a rider's and a driver's street-hail presses that
	// pair, metres.
	HailRadiusM float64 `env:"FLAGDOWN_HAIL_RADIUS_M" envDefault:"300"`
	// HailPingMaxAge is how old a driver's last accepted ping may be when he presses hail, by its
	// fix time against Redis's clock: 15 s, the interval of a client that pings while stationary,
	// plus 10 s of slack for a ping lost or late. An older one is refused (hail_last_ping_stale).
	HailPingMaxAge time.Duration `env:"FLAGDOWN_HAIL_PING_MAX_AGE" envDefault:"25s"`
	// HailGPSSlackM is the GPS error allowed on top of FLAGDOWN_HAIL_RADIUS_M, metres: a driver's
	// press, and the rider he pairs with, must lie within radius + slack of his last accepted ping.
	HailGPSSlackM float64 `env:"FLAGDOWN_HAIL_GPS_SLACK_M" envDefault:"50"`
	// HailCodeMaxWrong is how many wrong short codes (a code that none of the coded counterparts
	// near the press carries) one rider or driver may type per FLAGDOWN_HAIL_CODE_LOCKOUT; the
	// next press is refused until that window ends (429 hail_code_tries).
	HailCodeMaxWrong int `env:"FLAGDOWN_HAIL_CODE_MAX_WRONG" envDefault:"3"`
	// HailCodeLockout is the window wrong codes are counted in, from the first one, and so the
	// longest a presser stays locked out.
	HailCodeLockout time.Duration `env:"FLAGDOWN_HAIL_CODE_LOCKOUT" envDefault:"10m"`

	// RetryBase is the first wait before a ride nobody could be offered is matched again; each
	// further attempt doubles it (exponential backoff), capped at RetryMaxWait.
	RetryBase time.Duration `env:"FLAGDOWN_RETRY_BASE" envDefault:"2s"`
	// RetryMaxWait caps one retry wait.
	RetryMaxWait time.Duration `env:"FLAGDOWN_RETRY_MAX_WAIT" envDefault:"20s"`
	// RetryMaxAttempts is the most match attempts of a ride before it becomes UNMATCHED.
	RetryMaxAttempts int `env:"FLAGDOWN_RETRY_MAX_ATTEMPTS" envDefault:"8"`
	// RetryBudget is the longest a ride may wait for a driver, from its request, before it becomes UNMATCHED.
	RetryBudget time.Duration `env:"FLAGDOWN_RETRY_BUDGET" envDefault:"3m"`
	// PickupDeadline is the longest an ACCEPTED ride may wait for its start, from its accept: past
	// it (and reconcile's grace) the ride is re-opened and matched again without its driver
	// (ride.reopened, reason pickup_overdue). 0 turns the deadline off.
	PickupDeadline time.Duration `env:"FLAGDOWN_PICKUP_DEADLINE" envDefault:"30m"`
	// TripCeiling is the longest an IN_PROGRESS ride runs, from its start, before ride.overdue is
	// raised once (an alert: the ride goes on). 0 turns the alert off.
	TripCeiling time.Duration `env:"FLAGDOWN_TRIP_CEILING" envDefault:"3h"`
	// OfflineBrakeShare is the share (0..1) of the drivers seen in the last two heartbeat TTLs that,
	// silent for half a TTL or lapsed within the last TTL, makes the offline brake engage: a
	// platform fault, not drivers leaving, so nobody is taken offline while it holds (see
	// docs/resilience.md). 0 turns the brake off.
	OfflineBrakeShare float64 `env:"FLAGDOWN_OFFLINE_BRAKE_SHARE" envDefault:"0.55"`
	// OfflineBrakeMinDrivers is the least population (drivers seen in the last two heartbeat TTLs)
	// for which the offline brake may engage: a small fleet whose drivers leave together is not a
	// platform fault.
	OfflineBrakeMinDrivers int `env:"FLAGDOWN_OFFLINE_BRAKE_MIN_DRIVERS" envDefault:"20"`
	// MatchMode is how rides are matched: MatchGreedy (each ride on its own, as its event arrives),
	// MatchBatch (the rides to match within BatchWindow are assigned together, at the least total
	// score) or MatchAuto (per area and window, one or the other; see shared/matching).
	MatchMode string `env:"FLAGDOWN_MATCH_MODE" envDefault:"greedy"`
	// BatchWindow is, in batch and auto modes, how long the first ride of a batch waits for others before the
	// batch is assigned (the batch timer's TTL); shorter than ReconcileGrace (Validate).
	BatchWindow time.Duration `env:"FLAGDOWN_BATCH_WINDOW" envDefault:"2s"`
	// ScoreMissPenaltyM: metres of pickup distance added per offer the driver let expire recently.
	ScoreMissPenaltyM float64 `env:"FLAGDOWN_SCORE_MISS_PENALTY_M" envDefault:"250"`
	// MissMemory is how long a missed offer counts against a driver in the score.
	MissMemory time.Duration `env:"FLAGDOWN_MISS_MEMORY" envDefault:"30m"`
	// ReconcileInterval is how often flagdown dev runs the reconcile function (the cron schedule in production).
	ReconcileInterval time.Duration `env:"FLAGDOWN_RECONCILE_INTERVAL" envDefault:"30s"`
	// ReconcileGrace is how long past a deadline reconcile waits before repairing, so it does not race
	// the expiry source and events in flight.
	ReconcileGrace time.Duration `env:"FLAGDOWN_RECONCILE_GRACE" envDefault:"5s"`

	// Addr is where flagdown dev serves the functions (the gateway address).
	Addr string `env:"FLAGDOWN_ADDR" envDefault:"127.0.0.1:8080"`
	// PprofAddr, when set, is where flagdown dev serves net/http/pprof (CPU, heap, goroutine, block
	// and mutex profiles) on a listener of its own, never on the gateway; empty: no profiling.
	PprofAddr string `env:"FLAGDOWN_PPROF_ADDR"`
	// LogFormat is the format of every log line (shared/logging): json (one object per line, the
	// default) or text (key=value, for a human at a terminal).
	LogFormat string `env:"FLAGDOWN_LOG_FORMAT" envDefault:"json"`
	// LogLevel is the least severe level logged: debug, info, warn or error (slog.Level's names).
	LogLevel slog.Level `env:"FLAGDOWN_LOG_LEVEL" envDefault:"info"`
	// TriggerMaxDeliver is how many deliveries of an event a trigger makes before dead-lettering it
	// when its function fails on it (500, 408, a connection broken mid-request). Attempts the function
	// answers unavailable do not count (TriggerUnavailableLimit bounds them).
	TriggerMaxDeliver int `env:"FLAGDOWN_TRIGGER_MAX_DELIVER" envDefault:"5"`
	// TriggerUnavailableLimit is how long one delivery of an event keeps retrying a function that
	// answers unavailable (429, 502, 503, 504, connection refused, timeout) before the event is
	// dead-lettered (broker.WithUnavailableLimit; 15 minutes).
	TriggerUnavailableLimit time.Duration `env:"FLAGDOWN_TRIGGER_UNAVAILABLE_LIMIT" envDefault:"15m"`
	// RelayPollInterval is the outbox relay's longest wait between two looks for unpublished rows
	// (outbox.Options.PollInterval, 50 ms): the bound, beyond a look and a round, from a commit in
	// another process to its publication.
	RelayPollInterval time.Duration `env:"FLAGDOWN_RELAY_POLL_INTERVAL" envDefault:"50ms"`
	// ExpirySweepInterval is how often the expiry source sweeps the deadline set for overdue timed
	// keys (200 ms: timeouts acted on well within 1 s of their deadline).
	ExpirySweepInterval time.Duration `env:"FLAGDOWN_EXPIRY_SWEEP_INTERVAL" envDefault:"200ms"`

	// RetainProcessedEvents is how long a processed_events row (a consumer's record that it handled
	// an event) is kept, by processed_at, before pruning; at least MinRetainProcessedEvents (Validate).
	// The default (8 days) outlives the broker stream's 7-day MaxAge (shared/broker), so an event
	// redelivered from anywhere in the stream still finds its record.
	RetainProcessedEvents time.Duration `env:"FLAGDOWN_RETAIN_PROCESSED_EVENTS" envDefault:"192h"`
	// RetainOutbox is how long a published outbox row is kept, by published_at, before pruning.
	// Unpublished rows are never pruned.
	RetainOutbox time.Duration `env:"FLAGDOWN_RETAIN_OUTBOX" envDefault:"72h"`
	// RetainOffers is how long a decided (non-PENDING) offer of a terminal ride (COMPLETED, CANCELLED,
	// UNMATCHED) is kept, by the offer's created_at, before pruning (720h = 30 days). Offers of open
	// rides are never pruned: matching reads them to skip drivers already offered the ride.
	RetainOffers time.Duration `env:"FLAGDOWN_RETAIN_OFFERS" envDefault:"720h"`
	// DriverStateTTL is how long a driver's Redis hash (<prefix>driver:{driver}: position, status,
	// rating) lives after his last ping (stale ones included); longer than HeartbeatTTL (Validate).
	DriverStateTTL time.Duration `env:"FLAGDOWN_DRIVER_STATE_TTL" envDefault:"24h"`

	// JWTSecret is the HS256 shared secret client tokens are signed with (small deployments; at
	// least MinJWTSecretBytes bytes). Exactly one of JWTSecret and JWKSURL may be set (Validate); a
	// credential, so it comes from the secret file flagdown-jwt-secret in a deployment (SecretVars).
	JWTSecret string `env:"FLAGDOWN_JWT_SECRET"`
	// JWKSURL is the JSON Web Key Set URL of an identity provider whose RS256 or ES256 keys sign
	// client tokens (shared/auth refreshes it hourly, and on an unknown kid at most once a minute).
	JWKSURL string `env:"FLAGDOWN_JWKS_URL"`
	// JWTIssuer is the iss claim every client token must carry.
	JWTIssuer string `env:"FLAGDOWN_JWT_ISSUER" envDefault:"flagdown"`
	// JWTAudience is a value the aud claim of every client token must contain.
	JWTAudience string `env:"FLAGDOWN_JWT_AUDIENCE" envDefault:"flagdown"`
	// JWTLeeway is the clock skew allowed when checking a token's exp, nbf and iat (0..MaxJWTLeeway).
	JWTLeeway time.Duration `env:"FLAGDOWN_JWT_LEEWAY" envDefault:"30s"`
	// JWTMaxLifetime is the longest a client token may be valid (exp − iat); a token without iat or
	// living longer is refused (shared/auth). 0 disables the check.
	JWTMaxLifetime time.Duration `env:"FLAGDOWN_JWT_MAX_LIFETIME" envDefault:"24h"`

	// RateRidesPerMin is how many ride requests (order-create calls) one rider may make per minute,
	// with a burst of as many (shared/ratelimit); 0 disables the limit.
	RateRidesPerMin int `env:"FLAGDOWN_RATE_RIDES_PER_MIN" envDefault:"20"`
	// RatePingsPerMin is how many pings one driver may send per minute, with a burst of as many
	// (kept in his Redis hash, spent by the ping script: redisstore.Store.PingsPerMin); each ping of
	// a batch spends one unit, in order. The default, 600 (10 per second), is 40 times an
	// app pinging every 4 s; 0 disables the limit.
	RatePingsPerMin int `env:"FLAGDOWN_RATE_PINGS_PER_MIN" envDefault:"600"`
	// RateEstimatesPerMin is how many fare estimates (each stores a quote for 5 minutes) one rider
	// may ask per minute, with a burst of as many; 0 disables the limit.
	RateEstimatesPerMin int `env:"FLAGDOWN_RATE_ESTIMATES_PER_MIN" envDefault:"30"`
	// RateNearbyPerMin is how many nearby queries one caller may make per minute, with a burst of as
	// many (an app refreshing its map every 5 s makes 12); 0 disables the limit.
	RateNearbyPerMin int `env:"FLAGDOWN_RATE_NEARBY_PER_MIN" envDefault:"30"`
	// RateHailsPerMin is how many street-hail presses one rider or driver may make per minute, with
	// a burst of as many; 0 disables the limit.
	RateHailsPerMin int `env:"FLAGDOWN_RATE_HAILS_PER_MIN" envDefault:"10"`
	// RateConnectsPerMin is how many WebSocket connects one user may make per minute, with a burst
	// of as many; 0 disables the limit.
	RateConnectsPerMin int `env:"FLAGDOWN_RATE_CONNECTS_PER_MIN" envDefault:"10"`
	// RateDevicesPerMin is how many device registrations (PUT devices) one user may make per
	// minute, with a burst of as many; 0 disables the limit.
	RateDevicesPerMin int `env:"FLAGDOWN_RATE_DEVICES_PER_MIN" envDefault:"10"`
	// RatePerIPPerMin is how many calls of each budgeted kind but pings (ride requests, estimates,
	// nearby, hails, connects, device registrations) one client IP may make per minute, each kind
	// apart, when the client's IP is known (TrustedProxyHops); 0 disables the limit.
	RatePerIPPerMin int `env:"FLAGDOWN_RATE_PER_IP_PER_MIN" envDefault:"300"`
	// TrustedProxyHops is how many proxies in front of the functions append to X-Forwarded-For (the
	// gateway: 1); the client's IP is the entry that many places from the right
	// (httpx.ClientIP). 0, the default, trusts no X-Forwarded-For: per-IP budgets are off.
	TrustedProxyHops int `env:"FLAGDOWN_TRUSTED_PROXY_HOPS" envDefault:"0"`
	// MaxDevicesPerUser is how many push devices one rider or driver may have registered; a
	// registration of one more is refused (409 too_many_devices) until he removes one.
	MaxDevicesPerUser int `env:"FLAGDOWN_MAX_DEVICES_PER_USER" envDefault:"5"`

	// PushEndpoint is the API Gateway management API endpoint of the WebSocket API that holds
	// phones' connections, https://{api-id}.execute-api.{region}.amazonaws.com/{stage} (shared/push);
	// requests are SigV4-signed with the AWS credential chain (AWS_REGION, AWS_ACCESS_KEY_ID, roles).
	// Empty: push is off and clients poll. flagdown dev sets its local gateway's when unset.
	PushEndpoint string `env:"FLAGDOWN_PUSH_ENDPOINT"`
	// PushPositionInterval is the least time between two pushes of a driver's position to his ride's
	// rider (one per ride); 0 pushes none.
	PushPositionInterval time.Duration `env:"FLAGDOWN_PUSH_POSITION_INTERVAL" envDefault:"1s"`
	// SNSAppARNFCM is the ARN of the Amazon SNS platform application (platform GCM, i.e. Firebase
	// Cloud Messaging) that devices registered with platform fcm get their endpoint in, for the
	// mobile push fallback (shared/push): arn:aws:sns:<region>:<account>:app/GCM/<name>. Empty: no
	// FCM devices. With none of the three application ARNs set, the push fallback is off.
	SNSAppARNFCM string `env:"FLAGDOWN_SNS_APP_ARN_FCM"`
	// SNSAppARNAPNS is the ARN of the SNS platform application for Apple's production push service
	// (platform apns): arn:aws:sns:<region>:<account>:app/APNS/<name>. Empty: no apns devices.
	SNSAppARNAPNS string `env:"FLAGDOWN_SNS_APP_ARN_APNS"`
	// SNSAppARNAPNSSandbox is the ARN of the SNS platform application for Apple's sandbox push
	// service, development builds of the app (platform apns_sandbox):
	// arn:aws:sns:<region>:<account>:app/APNS_SANDBOX/<name>. Empty: no apns_sandbox devices.
	SNSAppARNAPNSSandbox string `env:"FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX"`
	// SNSEndpoint, when set, is the base URL SNS calls go to instead of the region's AWS endpoint
	// (a local stand-in, tests). The region is the one of the application ARNs (Validate: one for all).
	SNSEndpoint string `env:"FLAGDOWN_SNS_ENDPOINT"`

	// FaultClockOffset is a fault-injection knob for chaos runs (`flagdown chaos`): it shifts the
	// host clock of this process where flagdown still reads one (Now), as a machine whose clock is
	// off would. 0 (the default) in every real deployment.
	FaultClockOffset time.Duration `env:"FLAGDOWN_FAULT_CLOCK_OFFSET" envDefault:"0s"`
	// FaultRelayExitAfterPublish is a fault-injection knob for chaos runs, read only by `flagdown
	// relay`: when N > 0 the relay exits the process with status FaultRelayExitStatus right after
	// the broker acknowledged its N-th event and before the row is marked published (a crash
	// between publish and mark). 0 (the default) disables it.
	FaultRelayExitAfterPublish int `env:"FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH" envDefault:"0"`
}

// MinJWTSecretBytes is the shortest FLAGDOWN_JWT_SECRET Validate accepts: 32 bytes, the output
// size of SHA-256 (RFC 7518 §3.2 requires an HS256 key at least as long as the hash output).
const MinJWTSecretBytes = 32

// MaxJWTLeeway is the largest FLAGDOWN_JWT_LEEWAY Validate accepts.
const MaxJWTLeeway = 5 * time.Minute

// FaultRelayExitStatus is the exit status of a `flagdown relay` stopped by
// FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH, distinct from the status 1 of an ordinary failure.
const FaultRelayExitStatus = 86

// Now is the process's host clock shifted by FaultClockOffset (time.Now for a nil Config). Deadlines
// and windows do not use it: they are Redis's TIME and PostgreSQL's now().
func (c *Config) Now() time.Time {
	if c == nil {
		return time.Now()
	}
	return time.Now().Add(c.FaultClockOffset)
}

// MinRetainProcessedEvents is the shortest FLAGDOWN_RETAIN_PROCESSED_EVENTS Validate accepts. A
// processed_events row is what makes a consumer ignore a redelivered event, so it must outlive every
// redelivery: JetStream drops re-publishes for only broker.DuplicateWindow (5 min) and a trigger
// redelivers a failed event for seconds to minutes (broker.DefaultBackOff, AckWait, Knative retries).
// One hour leaves a wide margin over those windows.
const MinRetainProcessedEvents = time.Hour

// Load reads the configuration from the process environment, completed from secret files
// (WithSecrets: each of SecretVars under FLAGDOWN_SECRETS_DIR when unset).
func Load() (*Config, error) {
	environ, err := WithSecrets(processEnviron())
	if err != nil {
		return nil, err
	}
	return parse(env.Options{Environment: environ})
}

// FromEnv reads the configuration from an explicit environment (tests), ignoring the process's.
func FromEnv(environ map[string]string) (*Config, error) {
	return parse(env.Options{Environment: environ})
}

func parse(opts env.Options) (*Config, error) {
	for v, why := range RemovedVariables {
		if opts.Environment[v] != "" {
			return nil, fmt.Errorf("config: %s is no longer read: %s", v, why)
		}
	}
	var c Config
	if err := env.ParseWithOptions(&c, opts); err != nil {
		return nil, describe(err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// describe names the environment variable of each field that failed to parse.
func describe(err error) error {
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("config: %w", err)
	}
	msgs := make([]string, 0, len(agg.Errors))
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if f, ok := reflect.TypeOf(Config{}).FieldByName(pe.Name); ok {
				msgs = append(msgs, fmt.Sprintf("%s: %v", f.Tag.Get("env"), pe.Err))
				continue
			}
		}
		msgs = append(msgs, e.Error())
	}
	return fmt.Errorf("config: %s", strings.Join(msgs, "; "))
}

// Matching modes (FLAGDOWN_MATCH_MODE).
const (
	// MatchGreedy matches each ride on its own as its event arrives: the best-scoring available
	// driver whose offer lock it wins.
	MatchGreedy = "greedy"
	// MatchBatch gathers the rides to match for FLAGDOWN_BATCH_WINDOW and assigns them together at
	// the least total score (dispatch.Assign).
	MatchBatch = "batch"
	// MatchAuto chooses per area (the pickup's geohash cell) and per window between MatchGreedy and
	// MatchBatch from the area's supply and demand (see shared/matching Decide).
	MatchAuto = "auto"
)

// Validate checks the rules between values that the parser cannot.
func (c *Config) Validate() error {
	if c.MatchMode != MatchGreedy && c.MatchMode != MatchBatch && c.MatchMode != MatchAuto {
		return fmt.Errorf("config: FLAGDOWN_MATCH_MODE must be %s, %s or %s", MatchGreedy, MatchBatch, MatchAuto)
	}
	if c.BatchWindow < 10*time.Millisecond || (c.MatchMode != MatchGreedy && c.BatchWindow >= c.ReconcileGrace) {
		return fmt.Errorf("config: FLAGDOWN_BATCH_WINDOW (%s) must be at least 10ms and, in batch and auto modes, shorter than FLAGDOWN_RECONCILE_GRACE (%s): "+
			"reconcile would otherwise match again the rides waiting for their window", c.BatchWindow, c.ReconcileGrace)
	}
	if c.SurgeMode != "off" && c.SurgeMode != "shadow" && c.SurgeMode != "on" {
		return fmt.Errorf("config: FLAGDOWN_SURGE_MODE must be off, shadow or on")
	}
	for _, r := range []struct {
		bad  bool
		rule string
	}{
		{c.SurgeWindow < time.Minute, "FLAGDOWN_SURGE_WINDOW must be at least 1m"},
		{c.SurgeUpdateInterval < time.Second, "FLAGDOWN_SURGE_UPDATE_INTERVAL must be at least 1s"},
		{!(c.SurgeFloor >= 1) || math.IsInf(c.SurgeFloor, 0), "FLAGDOWN_SURGE_FLOOR must be a number >= 1.0 (surge never discounts)"},
		{!(c.SurgeCeiling >= c.SurgeFloor) || c.SurgeCeiling > 100, "FLAGDOWN_SURGE_CEILING must be >= FLAGDOWN_SURGE_FLOOR and <= 100"},
		{!(c.SurgeMaxStep > 0) || math.IsInf(c.SurgeMaxStep, 0), "FLAGDOWN_SURGE_MAX_STEP must be a number > 0"},
		{!(c.SimSpeedup > 0) || math.IsInf(c.SimSpeedup, 0), "FLAGDOWN_SIM_SPEEDUP must be a number > 0"},
		{!(c.SurgeEmergencyCap >= 1) || math.IsInf(c.SurgeEmergencyCap, 0), "FLAGDOWN_SURGE_EMERGENCY_CAP must be a number >= 1.0"},
		{c.TriggerUnavailableLimit < time.Second, "FLAGDOWN_TRIGGER_UNAVAILABLE_LIMIT must be at least 1s"},
	} {
		if r.bad {
			return fmt.Errorf("config: %s", r.rule)
		}
	}
	if err := logging.CheckFormat(c.LogFormat); err != nil {
		return fmt.Errorf("config: FLAGDOWN_LOG_FORMAT: %w", err)
	}
	if len(c.ServiceArea) != 4 || c.ServiceArea[0] >= c.ServiceArea[2] || c.ServiceArea[1] >= c.ServiceArea[3] {
		return fmt.Errorf("config: FLAGDOWN_SERVICE_AREA must be minLat,minLng,maxLat,maxLng with min < max")
	}
	if len(c.SearchRadiiM) == 0 {
		return fmt.Errorf("config: FLAGDOWN_SEARCH_RADII_M must list at least one radius")
	}
	for i, r := range c.SearchRadiiM {
		if r <= 0 || (i > 0 && r <= c.SearchRadiiM[i-1]) {
			return fmt.Errorf("config: FLAGDOWN_SEARCH_RADII_M must be positive and increasing")
		}
	}
	if c.HailWindow < 10*time.Millisecond || c.HailWindow > time.Minute {
		return fmt.Errorf("config: FLAGDOWN_HAIL_WINDOW (%s) must be between 10ms and 1m", c.HailWindow)
	}
	if !(c.HailRadiusM > 0 && c.HailRadiusM <= 2000) {
		return fmt.Errorf("config: FLAGDOWN_HAIL_RADIUS_M (%v) must be more than 0 and at most 2000 metres", c.HailRadiusM)
	}
	if c.HailPingMaxAge < time.Second || c.HailPingMaxAge > 10*time.Minute {
		return fmt.Errorf("config: FLAGDOWN_HAIL_PING_MAX_AGE (%s) must be between 1s and 10m", c.HailPingMaxAge)
	}
	if !(c.HailGPSSlackM >= 0 && c.HailGPSSlackM <= 500) {
		return fmt.Errorf("config: FLAGDOWN_HAIL_GPS_SLACK_M (%v) must be between 0 and 500 metres", c.HailGPSSlackM)
	}
	if c.HailCodeMaxWrong < 1 || c.HailCodeLockout < time.Second {
		return fmt.Errorf("config: FLAGDOWN_HAIL_CODE_MAX_WRONG must be >= 1 and FLAGDOWN_HAIL_CODE_LOCKOUT >= 1s")
	}
	if c.OfferWindow < time.Second || c.HeartbeatTTL < time.Second {
		return fmt.Errorf("config: FLAGDOWN_OFFER_WINDOW and FLAGDOWN_HEARTBEAT_TTL must be at least 1s")
	}
	if c.RetryBase <= 0 || c.RetryMaxWait < c.RetryBase || c.RetryMaxAttempts < 1 || c.RetryBudget <= 0 {
		return fmt.Errorf("config: FLAGDOWN_RETRY_BASE must be > 0 and <= FLAGDOWN_RETRY_MAX_WAIT, FLAGDOWN_RETRY_MAX_ATTEMPTS >= 1, FLAGDOWN_RETRY_BUDGET > 0")
	}
	if c.PickupDeadline < 0 || c.TripCeiling < 0 {
		return fmt.Errorf("config: FLAGDOWN_PICKUP_DEADLINE (%s) and FLAGDOWN_TRIP_CEILING (%s) must be >= 0 (0 turns them off)", c.PickupDeadline, c.TripCeiling)
	}
	if !(c.OfflineBrakeShare >= 0 && c.OfflineBrakeShare <= 1) || c.OfflineBrakeMinDrivers < 1 {
		return fmt.Errorf("config: FLAGDOWN_OFFLINE_BRAKE_SHARE (%v) must be between 0 and 1 (0 turns the brake off), FLAGDOWN_OFFLINE_BRAKE_MIN_DRIVERS (%d) >= 1",
			c.OfflineBrakeShare, c.OfflineBrakeMinDrivers)
	}
	if c.ReconcileInterval <= 0 || c.ReconcileGrace < 0 || c.ExpirySweepInterval <= 0 {
		return fmt.Errorf("config: FLAGDOWN_RECONCILE_INTERVAL and FLAGDOWN_EXPIRY_SWEEP_INTERVAL must be > 0, FLAGDOWN_RECONCILE_GRACE >= 0")
	}
	if c.RedisTimeout < 10*time.Millisecond || c.RedisTimeout > 10*time.Second {
		return fmt.Errorf("config: FLAGDOWN_REDIS_TIMEOUT (%s) must be between 10ms and 10s", c.RedisTimeout)
	}
	if c.MaxBatch < 1 || c.SearchCount < 1 || c.MaxBodyBytes < 1024 {
		return fmt.Errorf("config: FLAGDOWN_MAX_BATCH and FLAGDOWN_SEARCH_COUNT must be >= 1, FLAGDOWN_MAX_BODY_BYTES >= 1024")
	}
	if c.MaxClockSkew >= c.HeartbeatTTL {
		return fmt.Errorf("config: FLAGDOWN_MAX_CLOCK_SKEW (%s) must be shorter than FLAGDOWN_HEARTBEAT_TTL (%s): "+
			"a ping stamped up to the skew in the future makes the driver's later pings stale for that long, "+
			"which must not outlast his heartbeat", c.MaxClockSkew, c.HeartbeatTTL)
	}
	if c.RetainProcessedEvents <= 0 || c.RetainOutbox <= 0 || c.RetainOffers <= 0 {
		return fmt.Errorf("config: FLAGDOWN_RETAIN_PROCESSED_EVENTS, FLAGDOWN_RETAIN_OUTBOX and FLAGDOWN_RETAIN_OFFERS must be > 0")
	}
	if c.RetainProcessedEvents < MinRetainProcessedEvents {
		return fmt.Errorf("config: FLAGDOWN_RETAIN_PROCESSED_EVENTS (%s) must be at least %s: "+
			"a consumer must still know an event it handled when the event is redelivered", c.RetainProcessedEvents, MinRetainProcessedEvents)
	}
	if c.RateRidesPerMin < 0 || c.RatePingsPerMin < 0 || c.RateEstimatesPerMin < 0 || c.RateNearbyPerMin < 0 ||
		c.RateHailsPerMin < 0 || c.RateConnectsPerMin < 0 || c.RateDevicesPerMin < 0 || c.RatePerIPPerMin < 0 {
		return fmt.Errorf("config: FLAGDOWN_RATE_*_PER_MIN must be >= 0 (0 disables)")
	}
	if c.TrustedProxyHops < 0 || c.TrustedProxyHops > 10 {
		return fmt.Errorf("config: FLAGDOWN_TRUSTED_PROXY_HOPS must be between 0 and 10")
	}
	if c.MaxDevicesPerUser < 1 {
		return fmt.Errorf("config: FLAGDOWN_MAX_DEVICES_PER_USER must be >= 1")
	}
	if c.PushPositionInterval < 0 {
		return fmt.Errorf("config: FLAGDOWN_PUSH_POSITION_INTERVAL must be >= 0 (0 pushes no positions)")
	}
	if c.PushEndpoint != "" {
		if u, err := url.Parse(c.PushEndpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("config: FLAGDOWN_PUSH_ENDPOINT must be an http(s) URL such as https://{api-id}.execute-api.{region}.amazonaws.com/{stage}")
		}
	}
	if c.FaultRelayExitAfterPublish < 0 {
		return fmt.Errorf("config: FLAGDOWN_FAULT_RELAY_EXIT_AFTER_PUBLISH must be >= 0")
	}
	if c.JWTSecret != "" && c.JWKSURL != "" {
		return fmt.Errorf("config: set only one of FLAGDOWN_JWT_SECRET (HS256) and FLAGDOWN_JWKS_URL (RS256/ES256 from an identity provider)")
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < MinJWTSecretBytes {
		return fmt.Errorf("config: FLAGDOWN_JWT_SECRET must be at least %d bytes", MinJWTSecretBytes)
	}
	if c.JWKSURL != "" && !jwksURLOK(c.JWKSURL) {
		return fmt.Errorf("config: FLAGDOWN_JWKS_URL must be an https:// URL (http:// only to a loopback address, for tests): " +
			"the key set decides which tokens are accepted, so it must not travel in plain text")
	}
	if c.JWTMaxLifetime < 0 {
		return fmt.Errorf("config: FLAGDOWN_JWT_MAX_LIFETIME must be >= 0 (0 disables)")
	}
	if c.JWTIssuer == "" || c.JWTAudience == "" {
		return fmt.Errorf("config: FLAGDOWN_JWT_ISSUER and FLAGDOWN_JWT_AUDIENCE must not be empty")
	}
	if c.JWTLeeway < 0 || c.JWTLeeway > MaxJWTLeeway {
		return fmt.Errorf("config: FLAGDOWN_JWT_LEEWAY must be between 0s and %s", MaxJWTLeeway)
	}
	if err := c.validateInternal(); err != nil {
		return err
	}
	if err := c.validateSNS(); err != nil {
		return err
	}
	if c.DriverStateTTL <= c.HeartbeatTTL {
		return fmt.Errorf("config: FLAGDOWN_DRIVER_STATE_TTL (%s) must be longer than FLAGDOWN_HEARTBEAT_TTL (%s)", c.DriverStateTTL, c.HeartbeatTTL)
	}
	return nil
}

// validateInternal checks the internal credentials (shared/internalauth): each parses, the maximum
// event age covers the broker's retention and is covered by the processed_events retention, and the
// bearer token is not the signing key.
func (c *Config) validateInternal() error {
	signer, err := internalauth.ParseSigner(c.EventSigningKey)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if _, err := internalauth.ParseVerifier(c.EventVerifyKeys, c.EventMaxAge); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	tokens, err := internalauth.ParseTokens(c.InternalToken)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if signer.Configured() {
		seed := signer.Secret()[len(signer.KeyID())+1:]
		if tokens.Contains(strings.TrimSpace(c.EventSigningKey)) || tokens.Contains(seed) {
			return fmt.Errorf("config: %s must be a different secret from %s: whoever calls reconcile must not be able to sign events",
				internalauth.TokenVariable, internalauth.SigningKeyVariable)
		}
	}
	if c.EventMaxAge < internalauth.MinMaxAge {
		return fmt.Errorf("config: FLAGDOWN_EVENT_MAX_AGE (%s) must be at least %s, the broker stream's retention: "+
			"a shorter age refuses events the broker still redelivers", c.EventMaxAge, internalauth.MinMaxAge)
	}
	if c.EventMaxAge > c.RetainProcessedEvents {
		return fmt.Errorf("config: FLAGDOWN_EVENT_MAX_AGE (%s) must not exceed FLAGDOWN_RETAIN_PROCESSED_EVENTS (%s): "+
			"an event replayed after its processed_events row was pruned would act twice", c.EventMaxAge, c.RetainProcessedEvents)
	}
	return nil
}

// RemovedVariables are variables flagdown no longer reads, with what replaced them; Load and
// FromEnv refuse an environment that sets one, so that a deployment is not left believing it is
// configured.
var RemovedVariables = map[string]string{
	"FLAGDOWN_INTERNAL_SECRET": "the shared HMAC secret is gone: events are signed with " + internalauth.SigningKeyVariable +
		" (relay and expiry source only), verified with " + internalauth.VerifyKeysVariable + ", and internal calls carry " +
		internalauth.TokenVariable + " (see docs/security.md; `flagdown keygen` prints a key pair)",
}

// jwksURLOK reports whether u is an https URL with a host, or an http URL to a loopback address
// (127.0.0.0/8, ::1, localhost).
func jwksURLOK(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return false
	}
	switch p.Scheme {
	case "https":
		return true
	case "http":
		h := p.Hostname()
		if h == "localhost" {
			return true
		}
		ip := net.ParseIP(h)
		return ip != nil && ip.IsLoopback()
	}
	return false
}

// snsAppARNRe is an SNS platform application ARN: partition, region, 12-digit account, platform,
// application name (SNS allows 1..256 of A-Z a-z 0-9 _ - .).
var snsAppARNRe = regexp.MustCompile(`^arn:aws[a-z-]*:sns:([a-z0-9-]+):[0-9]{12}:app/([A-Z_]+)/[A-Za-z0-9_.-]{1,256}$`)

// validateSNS checks the push fallback's variables: each application ARN set is an SNS platform
// application of its platform, all in one region, and FLAGDOWN_SNS_ENDPOINT is an http(s) URL.
func (c *Config) validateSNS() error {
	region := ""
	for _, a := range []struct{ name, value, platform string }{
		{"FLAGDOWN_SNS_APP_ARN_FCM", c.SNSAppARNFCM, "GCM"},
		{"FLAGDOWN_SNS_APP_ARN_APNS", c.SNSAppARNAPNS, "APNS"},
		{"FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX", c.SNSAppARNAPNSSandbox, "APNS_SANDBOX"},
	} {
		if a.value == "" {
			continue
		}
		m := snsAppARNRe.FindStringSubmatch(a.value)
		if m == nil || m[2] != a.platform {
			return fmt.Errorf("config: %s must be an SNS platform application ARN arn:aws:sns:<region>:<account>:app/%s/<name>", a.name, a.platform)
		}
		if region != "" && m[1] != region {
			return fmt.Errorf("config: FLAGDOWN_SNS_APP_ARN_* must all be in one region (found %s and %s)", region, m[1])
		}
		region = m[1]
	}
	if c.SNSEndpoint != "" && !strings.HasPrefix(c.SNSEndpoint, "https://") && !strings.HasPrefix(c.SNSEndpoint, "http://") {
		return fmt.Errorf("config: FLAGDOWN_SNS_ENDPOINT must be an http(s) URL")
	}
	return nil
}
