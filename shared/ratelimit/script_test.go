package ratelimit

import "testing"

// redisRateAllowNSHA1 is the SHA1 of redis_rate v10.0.1's allowN script (its lua.go), the script
// Allow runs.
const redisRateAllowNSHA1 = "f52a5b566060d79fd321d695df55bc918339c4aa"

// TestAllowNScriptIsRedisRates holds what AllowEach rests on: the script loaded from
// scripts/allow_n.lua, header stripped, is redis_rate's byte for byte (same SHA1), so both share
// one script and one budget per key.
func TestAllowNScriptIsRedisRates(t *testing.T) {
	if got := allowNScript.Hash(); got != redisRateAllowNSHA1 {
		t.Fatalf("allow_n.lua loads as a script of SHA1 %s, redis_rate's allowN is %s: the body after the header must stay byte for byte redis_rate's",
			got, redisRateAllowNSHA1)
	}
}
