// Package pricing owns the price and the wait a rider is quoted: the fare estimate with the surge
// multiplier of his pickup's cell, and the predicted pickup wait. fare-estimate quotes them (and
// stores the quote), order-create charges a stored quote or, without one, quotes again itself, so
// a rider never chooses his multiplier.
//
// Surge per cell (dispatch.SurgeParams, surge.go): a cell is the geohash of the pickup at
// dispatch.SurgeCellPrecision. Its demand is the rides requested from it over the sliding window
// (FLAGDOWN_SURGE_WINDOW, counted by order-create), its supply the drivers of the available GEO set
// inside its box (COUNT-bounded by SupplyBound), both read at estimate time. The multiplier is
// computed lazily: an estimate finding the cell's stored multiplier at least
// FLAGDOWN_SURGE_UPDATE_INTERVAL old (or none) computes the next one with dispatch.SurgeMultiplier
// from it and stores it compare-and-set (redisstore.StoreSurge), so a multiplier moves by at most
// FLAGDOWN_SURGE_MAX_STEP per interval however many estimates race. order-create without a quote
// prices at the multiplier in force and writes nothing before the ride exists (Price); the due
// update goes with the demand count after the insert (Requested). The ceiling and the emergency
// cap apply at once, also to a stored value (dispatch.CapSurge); a cell whose stored multiplier
// expired has no data and restarts from 1.0; when the surge data cannot be read the rider is
// charged 1.0 (missing data) and the failure is logged.
//
// Wait estimate (dispatch.EstimateWait): the recent match delay (an EWMA of request → accept over
// accepts, kept in Redis, fed by lifecycle's accept) + the nearest available driver's straight-line
// distance, searched within the largest match radius, × the drive pace learned from pickups
// (dispatch.DrivePace, fed by lifecycle's start; FLAGDOWN_ROAD_FACTOR / FLAGDOWN_AVG_SPEED_MPS
// before 10 pickups), under batch and auto matching at most the recent mean drive to a pickup
// (dispatch.DrivePace.WindowDriveS, dispatch.CapDrive), + the calibration learned from what happened (dispatch.Calibrate): the
// exponentially weighted mean residual of the waits quoted in the pickup's cell at this hour of
// day (the city's below dispatch.WaitCalibrationMinSamples pickups), fed by lifecycle when a quoted
// ride starts (redisstore.RecordWaitError, dispatch.FoldWaitResidual). A rider reads it, so it is the rider view (dispatch.RiderCell): the
// distance is to the nearest driver's cell centre (nearestCellM) and the calibrated estimate is
// rounded to dispatch.RiderWaitStepS (dispatch.RiderWait), so no series of estimates locates a driver
// closer than his cell.
package pricing

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/redisstore"
)

// QuoteTTL is how long a quote may be charged after fare-estimate made it: long enough for a rider
// to read the price and confirm, short enough that the multiplier is still about the current one
// (at most QuoteTTL / FLAGDOWN_SURGE_UPDATE_INTERVAL steps behind).
const QuoteTTL = 5 * time.Minute

// SupplyBound is the most drivers counted as a cell's supply (the GEOSEARCH COUNT): a cell with
// more has a ratio below any surge threshold for demand under SupplyBound × threshold, and the
// reply stays small whatever the fleet.
const SupplyBound = 200

// Quote is a fare estimate with its surge multiplier and wait estimate, as fare-estimate answers it
// and order-create charges it.
type Quote struct {
	// ID names the stored quote (a lower-case UUID); empty for a quote order-create made itself.
	ID      string         `json:"id,omitempty"`
	RiderID string         `json:"rider_id"`
	Pickup  dispatch.Point `json:"pickup"`
	Dropoff dispatch.Point `json:"dropoff"`
	// Cell is the pickup's geohash cell (dispatch.SurgeCellPrecision).
	Cell string `json:"cell"`
	// Mode is the surge mode the quote was made in.
	Mode dispatch.SurgeMode `json:"mode"`
	// Fare is the estimate with Multiplier applied (dispatch.SurgedFare): cents, metres, seconds.
	Fare dispatch.Estimate `json:"fare"`
	// Multiplier is what the rider is charged (1.0 unless Mode is on).
	Multiplier float64 `json:"multiplier"`
	// Computed is the cell's multiplier (what mode on charges); nil when surge is off.
	Computed *float64 `json:"computed,omitempty"`
	// Load is the cell's supply and demand the multiplier came from (zero when surge is off).
	Load dispatch.CellLoad `json:"load"`
	// Wait is the predicted pickup wait; nil when no available driver is within the largest match
	// radius.
	Wait *dispatch.WaitEstimate `json:"wait,omitempty"`
	// ExpiresAt is when a stored quote can no longer be charged (host clock, for the rider's app).
	ExpiresAt time.Time `json:"expires_at"`

	// update is the cell's due multiplier update Price left for Requested.
	update *pendingUpdate
}

// Service quotes fares and waits; one per process, safe for concurrent use.
type Service struct {
	store  *redisstore.Store
	cfg    *config.Config
	log    *slog.Logger
	params dispatch.SurgeParams
	mode   dispatch.SurgeMode
}

// New returns the service over store with the surge settings of cfg (FLAGDOWN_SURGE_*; threshold,
// sensitivity and minimum demand are dispatch.DefaultSurgeParams').
func New(store *redisstore.Store, cfg *config.Config, log *slog.Logger) *Service {
	p := dispatch.DefaultSurgeParams()
	p.Floor, p.Ceiling, p.MaxStep, p.EmergencyCap = cfg.SurgeFloor, cfg.SurgeCeiling, cfg.SurgeMaxStep, cfg.SurgeEmergencyCap
	return &Service{store: store, cfg: cfg, log: log, params: p, mode: dispatch.SurgeMode(cfg.SurgeMode)}
}

// Mode is the configured surge mode.
func (s *Service) Mode() dispatch.SurgeMode { return s.mode }

func (s *Service) fareParams() dispatch.FareParams { return s.cfg.Rules().Fare }

func (s *Service) nearRadiusM() float64 { return s.cfg.SearchRadiiM[len(s.cfg.SearchRadiiM)-1] }

// Estimate quotes a ride of riderID from pickup to dropoff (both already validated), as
// fare-estimate shows it: the cell's multiplier (updated first when its update is due), the fare
// with it, and the wait. It does not store the quote (Offer does). In shadow mode it logs the
// computed multiplier. Errors: unavailable when Redis cannot be read for the wait (surge data that
// cannot be read is missing data, charged 1.0).
func (s *Service) Estimate(ctx context.Context, riderID string, pickup, dropoff dispatch.Point) (*Quote, error) {
	return s.quote(ctx, riderID, pickup, dropoff, true)
}

// Price quotes a ride as Estimate does but writes nothing: the multiplier is the one in force (the
// stored one, capped), and an update that is due is kept in the quote for Requested to store once
// the ride exists (order-create without a quote: a refused request writes nothing). The reads
// carry also (e.g. the rider's rate-limit check, ratelimit.Spend) in their first round trip.
func (s *Service) Price(ctx context.Context, riderID string, pickup, dropoff dispatch.Point, also ...redisstore.Piggyback) (*Quote, error) {
	return s.quote(ctx, riderID, pickup, dropoff, false, also...)
}

func (s *Service) quote(ctx context.Context, riderID string, pickup, dropoff dispatch.Point, update bool, also ...redisstore.Piggyback) (*Quote, error) {
	q := &Quote{RiderID: riderID, Pickup: pickup, Dropoff: dropoff, Mode: s.mode,
		Cell: dispatch.Geohash(pickup, dispatch.SurgeCellPrecision), Multiplier: 1}
	box, _ := dispatch.GeohashBox(q.Cell)
	surge := s.mode != dispatch.SurgeOff
	rd, err := s.store.ReadSurge(ctx, surge, q.Cell, box, s.cfg.SurgeWindow, SupplyBound, pickup, s.nearRadiusM(), also...)
	if err != nil && surge {
		// Missing data is 1.0: read the wait alone so one failing script does not fail the estimate.
		s.log.Warn("surge data unreadable: charging 1.0", "cell", q.Cell, "err", err)
		surge = false
		rd, err = s.store.ReadSurge(ctx, false, q.Cell, box, s.cfg.SurgeWindow, SupplyBound, pickup, s.nearRadiusM())
	}
	if err != nil {
		return nil, err
	}
	if surge {
		m := s.multiplier(ctx, q, rd, update)
		q.Computed, q.Load = &m, rd.Load
		q.Multiplier = dispatch.Charged(s.mode, m)
		metrics.SurgeMultiplier.WithLabelValues(string(s.mode)).Observe(m)
		if s.mode == dispatch.SurgeShadow && m > 1 {
			// A surge shadow mode did not charge; every quote's multiplier is in the metric.
			s.log.Info("surge shadow", "cell", q.Cell, "multiplier", m, "supply", rd.Load.Supply, "demand", rd.Load.Demand)
		}
	}
	q.Fare = dispatch.SurgedFare(dispatch.EstimateFare(s.fareParams(), pickup, dropoff), q.Multiplier)
	near, err := s.nearestCellM(ctx, pickup, rd.NearestM)
	if err != nil {
		return nil, err
	}
	if w, ok := dispatch.EstimateWait(s.riderMatchS(rd.MatchDelayS), near, rd.DrivePace.SecondsPerMetre(s.cfg.RoadFactor, s.cfg.AvgSpeedMPS)); ok {
		w = dispatch.RiderWait(dispatch.Calibrate(s.capDrive(w, rd.DrivePace), rd.WaitCalibrationS))
		q.Wait = &w
	}
	return q, nil
}

// riderMatchS is the recent match delay matchDelayS (the platform's seconds) in the riders' seconds
// (dispatch.RiderSeconds with FLAGDOWN_SIM_SPEEDUP), the seconds the wait estimate adds it to the
// drive in.
func (s *Service) riderMatchS(matchDelayS float64) float64 {
	return dispatch.RiderSeconds(time.Duration(matchDelayS*float64(time.Second)), s.cfg.SimSpeedup)
}

// nearestCandidates is how many of the drivers nearest to a pickup nearestCellM weighs: the nearest
// cell centre is almost always one of theirs.
const nearestCandidates = 20

// nearestCellM is the distance in metres from pickup to the nearest cell centre
// (dispatch.RiderDistanceM) of an available driver within the largest match radius, given the
// distance nearestM to the nearest driver himself (-1: none, and -1 is answered). Only a driver
// within nearestM + twice dispatch.RiderCellHalfDiagonalM can have a nearer centre than the nearest
// driver's, so one bounded search (redisstore.Nearby) finds it.
func (s *Service) nearestCellM(ctx context.Context, pickup dispatch.Point, nearestM float64) (float64, error) {
	if nearestM < 0 {
		return -1, nil
	}
	hits, err := s.store.Nearby(ctx, pickup, math.Min(s.nearRadiusM(), nearestM+2*dispatch.RiderCellHalfDiagonalM), nearestCandidates)
	if err != nil {
		return 0, err
	}
	best := -1.0
	for _, h := range hits {
		if d := dispatch.RiderDistanceM(pickup, h.Position); best < 0 || d < best {
			best = d
		}
	}
	return best, nil
}

// pendingUpdate is a cell's next multiplier, to store compare-and-set on the time of the one it
// was computed from (redisstore.StoreSurge).
type pendingUpdate struct {
	next     float64
	prevAtMs int64
}

// multiplier is the cell's current multiplier: the stored one, capped (dispatch.CapSurge), or, when
// an update is due, the next one (dispatch.SurgeMultiplier from the stored one). With store it
// stores the next one at once and answers whatever the store left (another estimate may have won
// the update); without, it answers the one in force and keeps the update in q for Requested. A
// failed store keeps the stored value (logged): the step limit is never broken.
func (s *Service) multiplier(ctx context.Context, q *Quote, rd redisstore.SurgeRead, store bool) float64 {
	emergency := s.cfg.SurgeEmergency
	inForce := 1.0 // no data
	if rd.PrevAtMs != 0 {
		inForce = dispatch.RoundMultiplier(dispatch.CapSurge(s.params, rd.Prev, emergency))
	}
	if rd.PrevAtMs != 0 && rd.NowMs-rd.PrevAtMs < s.cfg.SurgeUpdateInterval.Milliseconds() {
		return inForce
	}
	prev := rd.Prev
	if rd.PrevAtMs == 0 {
		prev = 1 // no data: start from 1.0
	}
	up := pendingUpdate{next: dispatch.RoundMultiplier(dispatch.SurgeMultiplier(s.params, prev, rd.Load, true, emergency)), prevAtMs: rd.PrevAtMs}
	if !store {
		q.update = &up
		return inForce
	}
	cur, err := s.storeUpdate(ctx, q.Cell, up)
	if err != nil {
		s.log.Warn("surge update not stored", "cell", q.Cell, "err", err)
		return inForce
	}
	return dispatch.RoundMultiplier(dispatch.CapSurge(s.params, cur, emergency))
}

// surgeTTL is how long a cell's multiplier is kept without updates: a few windows of silence;
// past that the cell has no data (1.0).
func (s *Service) surgeTTL() time.Duration {
	return max(3*s.cfg.SurgeWindow, 10*s.cfg.SurgeUpdateInterval)
}

func (s *Service) storeUpdate(ctx context.Context, cell string, up pendingUpdate) (float64, error) {
	cur, _, err := s.store.StoreSurge(ctx, cell, up.next, up.prevAtMs, s.cfg.SurgeUpdateInterval, s.surgeTTL())
	return cur, err
}

// BaseQuote quotes a ride of riderID from pickup to dropoff without Redis: the fare estimate at
// multiplier 1.0, no computed multiplier and no wait. order-create charges it when Redis does not
// answer (docs/resilience.md): never more than any quote the rider was shown, whose multiplier is
// at least 1.0.
func (s *Service) BaseQuote(riderID string, pickup, dropoff dispatch.Point) *Quote {
	q := &Quote{RiderID: riderID, Pickup: pickup, Dropoff: dropoff, Mode: s.mode,
		Cell: dispatch.Geohash(pickup, dispatch.SurgeCellPrecision), Multiplier: 1}
	q.Fare = dispatch.SurgedFare(dispatch.EstimateFare(s.fareParams(), pickup, dropoff), 1)
	return q
}

// Offer stores q under a new id for QuoteTTL and sets q.ID and q.ExpiresAt.
func (s *Service) Offer(ctx context.Context, q *Quote) error {
	q.ID = uuid.NewString()
	q.ExpiresAt = s.cfg.Now().Add(QuoteTTL).UTC().Truncate(time.Second)
	b, err := json.Marshal(q)
	if err != nil {
		return dispatch.Internal(err)
	}
	return s.store.PutQuote(ctx, q.ID, b, QuoteTTL)
}

// Take returns the stored quote id for a ride of riderID from pickup to dropoff. A quote that is
// unknown, expired or another rider's is a conflict quote_expired (the rider asks for a new
// estimate; another rider's quote is not told apart, so ids reveal nothing); a quote for another
// pickup or dropoff is invalid (field quote_id). The quote stays valid until it expires (a retried
// request, or a ride cancelled and asked for again, is charged the same). The read carries also in
// its round trip, as Price's does.
func (s *Service) Take(ctx context.Context, id, riderID string, pickup, dropoff dispatch.Point, also ...redisstore.Piggyback) (*Quote, error) {
	b, err := s.store.Quote(ctx, id, also...)
	if err != nil {
		return nil, err
	}
	var q Quote
	if b == nil || json.Unmarshal(b, &q) != nil || q.RiderID != riderID {
		return nil, dispatch.Conflict(dispatch.ReasonQuoteExpired, "the quote is unknown or expired: ask for a new fare estimate").With("quote_id", id)
	}
	if q.Pickup != pickup || q.Dropoff != dropoff {
		return nil, dispatch.Invalid("quote_id", "names a quote for another pickup or dropoff")
	}
	return &q, nil
}

// Requested records that ride rideID was created at quote q: its request counts in the pickup
// cell's demand, and the multiplier update Price found due is stored (compare-and-set, so it is
// lost to any update made meanwhile), in one pipelined round trip; nothing when surge is off. A
// failure is logged, not returned: the ride exists, and a missed count only lowers demand.
func (s *Service) Requested(ctx context.Context, q *Quote, rideID string) {
	if s.mode == dispatch.SurgeOff {
		return
	}
	var next float64
	var prevAtMs int64
	due := q.update != nil
	if due {
		next, prevAtMs = q.update.next, q.update.prevAtMs
	}
	if err := s.store.CountDemandAndStoreSurge(ctx, q.Cell, rideID, s.cfg.SurgeWindow, due, next, prevAtMs,
		s.cfg.SurgeUpdateInterval, s.surgeTTL()); err != nil {
		s.log.Warn("surge demand not counted", "cell", q.Cell, "ride_id", rideID, "err", err)
	}
}

// Wait predicts the remaining pickup wait of a ride waiting since since (its request or re-open):
// the recent match delay less the time already waited (at least 0) plus the nearest driver's drive
// (EstimateWait), calibrated (dispatch.Calibrate) and in the rider view (dispatch.RiderWait); nil
// when no driver is near.
func (s *Service) Wait(ctx context.Context, pickup dispatch.Point, since time.Time) (*dispatch.WaitEstimate, error) {
	rd, err := s.store.ReadSurge(ctx, false, "", dispatch.Area{}, s.cfg.SurgeWindow, SupplyBound, pickup, s.nearRadiusM())
	if err != nil {
		return nil, err
	}
	near, err := s.nearestCellM(ctx, pickup, rd.NearestM)
	if err != nil {
		return nil, err
	}
	waited := math.Max(0, dispatch.RiderSeconds(s.cfg.Now().Sub(since), s.cfg.SimSpeedup))
	w, ok := dispatch.EstimateWait(math.Max(0, s.riderMatchS(rd.MatchDelayS)-waited), near, rd.DrivePace.SecondsPerMetre(s.cfg.RoadFactor, s.cfg.AvgSpeedMPS))
	if !ok {
		return nil, nil
	}
	w = dispatch.RiderWait(dispatch.Calibrate(s.capDrive(w, rd.DrivePace), rd.WaitCalibrationS))
	return &w, nil
}

// capDrive is w with the drive ceiling of windowed matching (dispatch.DrivePace.WindowDriveS) when
// FLAGDOWN_MATCH_MODE is batch or auto (an auto area may be greedy: its rides take the nearest
// driver, and the calibration of their cell learns what the ceiling misses), else w.
func (s *Service) capDrive(w dispatch.WaitEstimate, pace dispatch.DrivePace) dispatch.WaitEstimate {
	if s.cfg.MatchMode == config.MatchGreedy {
		return w
	}
	return dispatch.CapDrive(w, pace.WindowDriveS())
}
