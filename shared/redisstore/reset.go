package redisstore

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// DeleteAll removes every key under the store's prefix (SCAN MATCH <prefix>* and UNLINK, 500 keys
// at a time, on every master of a cluster) and returns how many it removed: a clean slate for
// `flagdown migrate --fresh`, never part of serving. It refuses an empty prefix.
func (s *Store) DeleteAll(ctx context.Context) (int, error) {
	if s.prefix == "" {
		return 0, errors.New("redisstore: refusing to delete every key of the database: FLAGDOWN_REDIS_PREFIX is empty")
	}
	pattern := globEscape(s.prefix) + "*"
	n := 0
	one := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			n += len(batch)
			batch = batch[:0]
			return nil
		}
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 500 {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		return flush()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		// ForEachMaster calls back concurrently: collect the masters, then walk them one by one.
		var mu sync.Mutex
		var masters []*redis.Client
		err = c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			masters = append(masters, m)
			return nil
		})
		for _, m := range masters {
			if err == nil {
				err = one(ctx, m)
			}
		}
	case *redis.Client:
		err = one(ctx, c)
	default:
		return 0, errors.New("redisstore: DeleteAll needs a *redis.Client or *redis.ClusterClient")
	}
	return n, unavailable(err)
}

// globEscape escapes the characters SCAN MATCH treats as a pattern (* ? [ ] \).
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
