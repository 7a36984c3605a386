package chaos

import (
	"crypto/rand"
	"encoding/hex"
)

// tokenSecret returns a random FLAGDOWN_JWT_SECRET for one run: every flagdown dev the run starts
// verifies client tokens with it, and the replay mints its drivers' and riders' tokens with it.
func tokenSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
