package chaos

import (
	"crypto/rand"
	"encoding/hex"
)

// internalSecret returns a random FLAGDOWN_INTERNAL_SECRET for one run. Every platform process of
// the run gets the same one: a restarted flagdown dev must still verify the events the relays
// signed before (they stay in the broker's stream and are redelivered), and the second relay and
// expiry source sign for the same functions.
func internalSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
