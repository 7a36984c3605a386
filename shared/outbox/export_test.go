package outbox

import "time"

// SetIdleHook makes r call f with each wait of its idle loop, before it waits (set before Run).
func SetIdleHook(r *Relay, f func(wait time.Duration)) { r.idle = f }
