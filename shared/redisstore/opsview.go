package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// SampleAvailable returns the size of the GEO set of available drivers (ZCARD) and at most n of its
// members with their indexed positions: all of them when the set holds at most n, else n distinct
// ones drawn at random (ZRANDMEMBER, so a capped sample is spread over the city rather than the
// first n in geohash order). Two round trips (ZCARD and ZRANDMEMBER pipelined, then GEOPOS); no key
// is scanned. A member whose position vanished between the two is left out.
func (s *Store) SampleAvailable(ctx context.Context, n int) (total int64, hits []GeoHit, err error) {
	if n <= 0 {
		total, err = s.rdb.ZCard(ctx, s.geoKey()).Result()
		return total, nil, unavailable(err)
	}
	pipe := s.rdb.Pipeline()
	card := pipe.ZCard(ctx, s.geoKey())
	members := pipe.ZRandMember(ctx, s.geoKey(), n)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return 0, nil, unavailable(err)
	}
	ids := members.Val()
	if len(ids) == 0 {
		return card.Val(), nil, nil
	}
	pos, err := s.rdb.GeoPos(ctx, s.geoKey(), ids...).Result()
	if err != nil {
		return 0, nil, unavailable(err)
	}
	hits = make([]GeoHit, 0, len(ids))
	for i, p := range pos {
		if p != nil {
			hits = append(hits, GeoHit{DriverID: ids[i], Position: dispatch.Point{Lat: p.Latitude, Lng: p.Longitude}})
		}
	}
	return card.Val(), hits, nil
}

// DriverPositions returns the last accepted position of each driver from his hash (lat, lng), in
// the order of ids, in one pipelined round trip; nil for a driver whose hash holds none.
func (s *Store) DriverPositions(ctx context.Context, ids []string) ([]*dispatch.Point, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HMGet(ctx, s.driverKey(id), "lat", "lng")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable(err)
	}
	out := make([]*dispatch.Point, len(ids))
	for i, c := range cmds {
		if v := c.Val(); len(v) == 2 && v[0] != nil && v[1] != nil {
			out[i] = &dispatch.Point{Lat: f64(str(v[0])), Lng: f64(str(v[1]))}
		}
	}
	return out, nil
}

// RideDriverPosition names a ride and the driver it names, for RidePositions.
type RideDriverPosition struct {
	RideID, DriverID string
}

// RidePositions returns the live position of each ride's driver (the ridepos hash, as RidePosition
// reads it), in the order of rides, in one pipelined round trip; nil where none is known or the
// position Redis holds is not that driver's.
func (s *Store) RidePositions(ctx context.Context, rides []RideDriverPosition) ([]*RidePosition, error) {
	if len(rides) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(rides))
	for i, r := range rides {
		cmds[i] = pipe.HMGet(ctx, s.ridePosKey(r.RideID), "lat", "lng", "ts", "driver")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable(err)
	}
	out := make([]*RidePosition, len(rides))
	for i, c := range cmds {
		v := c.Val()
		if len(v) != 4 || v[0] == nil || v[1] == nil || v[2] == nil || rides[i].DriverID == "" || str(v[3]) != rides[i].DriverID {
			continue
		}
		t, _ := strconv.ParseInt(str(v[2]), 10, 64)
		out[i] = &RidePosition{Lat: f64(str(v[0])), Lng: f64(str(v[1])), At: time.UnixMilli(t).UTC()}
	}
	return out, nil
}
