package replay

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/flagdown/flagdown/shared/config"
)

// PlatformDefaultMaxSpeedMPS is the platform's default FLAGDOWN_MAX_SPEED_MPS (metres per wall
// second); a ping moving farther than that × wall seconds since the last applied ping, plus
// PlatformGPSNoiseM, is rejected as gps_jump (its heartbeat still counts).
const PlatformDefaultMaxSpeedMPS = 55

// PlatformGPSNoiseM is the distance in metres the platform always allows between two pings on top of
// its maximum speed × elapsed wall time before calling a move a gps_jump.
const PlatformGPSNoiseM = 50

// maxSentSpeedMPS caps the speed_mps sent in pings: the platform rejects a whole batch if one ping's
// speed_mps exceeds 2 × FLAGDOWN_MAX_SPEED_MPS.
const maxSentSpeedMPS = 100

// gpsJumpCheck returns how far a moving driver travels between two sent pings (metres) and how far
// the platform's default gps_jump rule allows for the wall time between them (metres): one ping
// interval apart, or, with the send rule, as many as a carrying driver needs to cover
// SendRuleMinMoveM (at most SendRuleMaxQuiet), whichever leaves less margin; wallS is the wall
// time between those two pings, seconds.
func gpsJumpCheck(o Options) (stepM, allowedM, wallS float64) {
	one := o.DriverSpeedMPS * o.PingInterval.Seconds()
	k := 1.0
	if o.SendRule && one > 0 {
		k = max(1, min(math.Ceil(SendRuleMinMoveM/one), math.Ceil(float64(SendRuleMaxQuiet)/float64(o.PingInterval))))
	}
	wallS = o.PingInterval.Seconds() / o.Speedup
	stepM, allowedM = one, PlatformDefaultMaxSpeedMPS*wallS+PlatformGPSNoiseM
	if kStep, kAllowed := k*one, PlatformDefaultMaxSpeedMPS*k*wallS+PlatformGPSNoiseM; kStep-kAllowed > stepM-allowedM {
		stepM, allowedM, wallS = kStep, kAllowed, k*wallS
	}
	return stepM, allowedM, wallS
}

// MaxBatchSize is the largest number of pings the replay puts in one location-update call.
const MaxBatchSize = 500

// Options configure a replay. Durations marked simulated are replay time; wall = simulated / Speedup.
type Options struct {
	// URL is the platform's base URL (gateway), e.g. http://127.0.0.1:8080, without a trailing slash.
	URL string
	// TripsPath is the trips CSV (pickup_time,pickup_lat,pickup_lng,dropoff_lat,dropoff_lng).
	TripsPath string
	// Trips, when non-nil, is used instead of reading TripsPath (tests); sorted by pickup time.
	Trips []Trip
	// Drivers is the number of simulated drivers (≥ 1).
	Drivers int
	// Minutes is the replayed window in simulated minutes, opening SkipMinutes after the file's
	// first pickup: [first+SkipMinutes, first+SkipMinutes+Minutes).
	Minutes float64
	// SkipMinutes is how many simulated minutes of the file, from its first pickup, the window skips
	// (≥ 0). The trips of those minutes are not replayed; the dropoffs of those that ended before the
	// window opens place the drivers (StartsDropoffsBefore). DefaultOptions: DefaultSkipMinutes.
	SkipMinutes float64
	// MatchMode names the platform's matching mode (FLAGDOWN_MATCH_MODE: "greedy", "batch" or "auto") for
	// the summary. The replay cannot observe it: it is what the replay was told the platform runs
	// with (flagdown replay: --match-mode, default the FLAGDOWN_MATCH_MODE of its own environment,
	// which make demo shares with flagdown dev). DefaultOptions: "greedy".
	MatchMode string
	// Speedup is simulated seconds per wall second (> 0).
	Speedup float64
	// PingInterval is each driver's ping interval, simulated time.
	PingInterval time.Duration
	// AcceptProb is the probability (0..1) a driver accepts an offer he answers; otherwise he declines.
	AcceptProb float64
	// NoAnswerProb is the probability (0..1), drawn per offer before AcceptProb, that the driver ignores
	// the offer: he neither accepts nor declines, and the platform times it out after its offer window
	// (FLAGDOWN_OFFER_WINDOW, wall time).
	NoAnswerProb float64
	// OfflineProbPerHour is the probability (0..1, 1 excluded) that a driver drops offline for good
	// within any one simulated hour of his shift (constant hazard −ln(1−p) per simulated hour, counted
	// from his first ping). A dropped driver stops pinging and answering: he abandons an offer he holds
	// and an ACCEPTED ride he is driving to (the platform re-opens it once his heartbeat TTL,
	// FLAGDOWN_HEARTBEAT_TTL wall time, lapses). A driver carrying a passenger (start sent, or driving to
	// the dropoff) completes that ride first and drops right after.
	OfflineProbPerHour float64
	// DriversDropTo, when > 0, is how many drivers remain after the supply drop (supply.go): at
	// DriversDropAt × Minutes (simulated, 0..1 excluded) after the window opened, the others end
	// their shift. 0: no supply drop. DefaultOptions: 0 and 0.5.
	DriversDropTo int
	DriversDropAt float64
	// DriverSpeedMPS is the straight-line driving speed, metres per simulated second.
	DriverSpeedMPS float64
	// DriverStarts is where the drivers start (see BuildStartPool); DefaultOptions:
	// StartsDropoffsBefore.
	DriverStarts DriverStarts
	// Seed seeds every random draw (driver start positions, think times, accept, no-answer and
	// offline decisions).
	Seed uint64
	// SummaryPath is where the summary JSON is written; empty writes none.
	SummaryPath string
	// Concurrency is the number of HTTP workers (and of idle connections kept per host).
	Concurrency int
	// Drain is the extra simulated time after the last order-create before the replay stops.
	Drain time.Duration
	// BatchSize is the number of pings per location-update call, 1..MaxBatchSize; 1 sends each ping
	// as a single-ping request.
	BatchSize int
	// CheckURL makes Run fail fast unless GET URL/readyz answers 200.
	CheckURL bool
	// Push makes every simulated driver and rider hold a WebSocket to the platform's gateway (GET
	// /ws, the local API Gateway of flagdown dev): drivers react to offers pushed to them instead of
	// waiting for their next ping answer, riders receive their ride's statuses, and the summary
	// reports offer push latency and messages lost. false keeps polling only.
	Push bool
	// SendRule applies the seed's send rule (sendrule.go): a stationary or carrying driver sends a
	// position only after SendRuleMinMoveM metres or SendRuleMaxQuiet (simulated); every ping
	// interval otherwise; a change of his ride phase at once. DefaultOptions: on (flagdown replay and
	// make demo; flagdown chaos turns it off unless asked). With Push off a stationary idle driver
	// learns of an offer only from a ping answer, so up to SendRuleMaxQuiet later.
	SendRule bool
	// Progress shows how far the replay is on out: a progress bar over simulated time when out is a
	// terminal, otherwise (a file, a pipe, CI) one plain line every ProgressEvery of wall time.
	Progress bool
	// ProgressEvery is the wall time between two progress lines when out is not a terminal; ≤ 0 means
	// DefaultProgressEvery.
	ProgressEvery time.Duration
	// RunID is embedded in driver and rider ids so runs do not collide; empty picks one from the clock.
	RunID string
	// SpreadMinute spreads trips whose pickup time is a whole minute (the 2013 data's resolution)
	// uniformly over that minute, so demand arrives as it did and not in one burst per minute.
	SpreadMinute bool
	// HTTPClient overrides the HTTP client (tests); nil builds one with connection reuse tuned to Concurrency.
	HTTPClient *http.Client
	// Verify makes Run check the platform's invariants at the end (package shared/invariants, as
	// `flagdown verify` does), VerifyGrace + VerifySettle after its last request, reading the
	// platform's PostgreSQL and Redis directly: the replay must run where it can reach them. Run
	// fails when a count is not 0 or when the check cannot run.
	Verify bool
	// VerifyGrace is the grace of that check (≥ 0): what is only eventually true counts once it has
	// stayed wrong this long.
	VerifyGrace time.Duration
	// JWTSecret is the platform's FLAGDOWN_JWT_SECRET: the replay mints every simulated driver's and
	// rider's token (and one ops token for batched pings) with it. Required.
	JWTSecret string
	// JWTIssuer and JWTAudience are the iss and aud of those tokens (the platform's
	// FLAGDOWN_JWT_ISSUER and FLAGDOWN_JWT_AUDIENCE; DefaultOptions: "flagdown").
	JWTIssuer, JWTAudience string
	// VerifyConfig names the platform's PostgreSQL and Redis (URLs, schema, key prefix); nil reads
	// them from the environment (config.Load), as `flagdown dev` does.
	VerifyConfig *config.Config
	// GroundTruth makes Run judge, at the end, the platform's offline decisions, re-openings, trip
	// alerts and acknowledged actions against what the replay knows (truth.go; Summary.GroundTruth),
	// reading the PostgreSQL and Redis of VerifyConfig. Run fails when a count is not 0 or when they
	// cannot be read.
	GroundTruth bool
	// HeartbeatTTL is the platform's FLAGDOWN_HEARTBEAT_TTL (wall time; > 0 with GroundTruth): a
	// stopped driver must be taken offline within it + OfflineGrace of his last answered ping.
	HeartbeatTTL time.Duration
	// OfflineGrace is that slack (wall time, ≥ 0; DefaultOptions: DefaultOfflineGrace).
	OfflineGrace time.Duration
	// Outages, when non-nil, returns the outages the run went through (the chaos controller's
	// faults); the offline deadlines falling in one are judged against its end (see Outage).
	Outages func() []Outage
}

// DefaultOptions returns the flag defaults of `flagdown replay`.
func DefaultOptions() Options {
	return Options{
		URL:                "http://127.0.0.1:8080",
		TripsPath:          "testdata/trips.csv",
		Drivers:            2000,
		Minutes:            20,
		SkipMinutes:        DefaultSkipMinutes,
		MatchMode:          MatchModeGreedy,
		Speedup:            8,
		PingInterval:       4 * time.Second,
		AcceptProb:         0.9,
		NoAnswerProb:       0.05,
		OfflineProbPerHour: 0.02,
		DriverSpeedMPS:     8,
		DriversDropAt:      0.5,
		DriverStarts:       StartsDropoffsBefore,
		Seed:               1,
		SummaryPath:        "demo-summary.json",
		Concurrency:        32,
		JWTIssuer:          "flagdown",
		JWTAudience:        "flagdown",
		Drain:              2 * time.Minute,
		BatchSize:          200,
		CheckURL:           true,
		Push:               true,
		SendRule:           true,
		SpreadMinute:       true,
		Progress:           true,
		Verify:             true,
		VerifyGrace:        DefaultVerifyGrace,
		HeartbeatTTL:       30 * time.Second,
		OfflineGrace:       DefaultOfflineGrace,
	}
}

// validate reports the first option out of its range.
func (o *Options) validate() error {
	switch {
	case o.URL == "":
		return errors.New("url is empty")
	case o.Drivers < 1:
		return errors.New("drivers must be ≥ 1")
	case !(o.Minutes > 0):
		return errors.New("minutes must be > 0")
	case !(o.SkipMinutes >= 0) || math.IsInf(o.SkipMinutes, 0):
		return errors.New("skip-minutes must be ≥ 0")
	case o.MatchMode != MatchModeGreedy && o.MatchMode != MatchModeBatch && o.MatchMode != MatchModeAuto:
		return fmt.Errorf("match-mode %q: want %s, %s or %s", o.MatchMode, MatchModeGreedy, MatchModeBatch, MatchModeAuto)
	case !(o.Speedup > 0) || math.IsInf(o.Speedup, 0):
		return errors.New("speedup must be > 0")
	case o.PingInterval <= 0:
		return errors.New("ping-interval must be > 0")
	case !(o.AcceptProb >= 0 && o.AcceptProb <= 1):
		return errors.New("accept-prob must be within 0..1")
	case !(o.NoAnswerProb >= 0 && o.NoAnswerProb <= 1):
		return errors.New("no-answer-prob must be within 0..1")
	case !(o.OfflineProbPerHour >= 0 && o.OfflineProbPerHour < 1):
		return errors.New("offline-prob must be within 0..1 (1 excluded: it is a per-hour probability)")
	case !(o.DriverSpeedMPS > 0):
		return errors.New("driver-speed-mps must be > 0")
	case o.Concurrency < 1:
		return errors.New("concurrency must be ≥ 1")
	case o.Drain < 0:
		return errors.New("drain must be ≥ 0")
	case o.BatchSize < 1 || o.BatchSize > MaxBatchSize:
		return fmt.Errorf("batch size must be within 1..%d", MaxBatchSize)
	case o.VerifyGrace < 0:
		return errors.New("verify-grace must be ≥ 0")
	case o.GroundTruth && (o.HeartbeatTTL <= 0 || o.OfflineGrace < 0):
		return errors.New("heartbeat-ttl must be > 0 and offline-grace ≥ 0 with ground-truth")
	}
	if _, err := ParseDriverStarts(string(o.DriverStarts)); err != nil {
		return err
	}
	return o.validateSupplyDrop()
}
