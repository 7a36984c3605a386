package redisstore

import "context"

// AvailableDrivers returns the number of drivers in the GEO set of available drivers (ZCARD, O(1)),
// for the flagdown_available_drivers gauge.
func (s *Store) AvailableDrivers(ctx context.Context) (int64, error) {
	return s.rdb.ZCard(ctx, s.geoKey()).Result()
}
