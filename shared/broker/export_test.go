package broker

import "time"

// WithAckWait sets the consumers' ack wait, so that a test can outlast it in seconds.
func WithAckWait(wait time.Duration) DispatcherOption {
	return func(d *Dispatcher) { d.ackWait = wait }
}
