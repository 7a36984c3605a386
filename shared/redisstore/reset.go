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
	n := 0
	err := s.scanKeys(ctx, globEscape(s.prefix)+"*", func(ctx context.Context, c *redis.Client, keys []string) error {
		if err := c.Unlink(ctx, keys...).Err(); err != nil {
			return err
		}
		n += len(keys)
		return nil
	})
	return n, unavailable(err)
}

// scanKeys calls fn with the keys matching pattern (SCAN MATCH, at most 500 at a time, on every
// master of a cluster, one master after the other), on the node that holds them. Errors are
// Redis's, or of fn.
func (s *Store) scanKeys(ctx context.Context, pattern string, fn func(ctx context.Context, c *redis.Client, keys []string) error) error {
	one := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		var batch []string
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := fn(ctx, c, batch)
			batch = batch[:0]
			return err
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
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		// ForEachMaster calls back concurrently: collect the masters, then walk them one by one.
		var mu sync.Mutex
		var masters []*redis.Client
		err := c.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
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
		return err
	case *redis.Client:
		return one(ctx, c)
	default:
		return errors.New("redisstore: scanning keys needs a *redis.Client or *redis.ClusterClient")
	}
}

// globEscape escapes the characters SCAN MATCH treats as a pattern (* ? [ ] \).
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
