package chaos

import "github.com/flagdown/flagdown/shared/internalauth"

// eventSigner returns a signing key generated for one run. Every platform process of the run gets
// the same one (FLAGDOWN_EVENT_SIGNING_KEY, with its public key as FLAGDOWN_EVENT_VERIFY_KEYS): a
// restarted flagdown dev must still verify the events the relays signed before (they stay in the
// broker's stream and are redelivered), and the second relay and expiry source sign for the same
// functions.
func eventSigner() (*internalauth.Signer, error) { return internalauth.GenerateSigner("chaos") }
