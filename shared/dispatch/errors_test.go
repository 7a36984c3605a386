package dispatch_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// An error no layer classified that is a lost or refused connection to a dependency (PostgreSQL
// crashed, a dial refused, a connection cut mid-answer) is unavailable (503: try again), not an
// internal error: the trigger dispatcher holds an event answered 503 without spending a delivery
// attempt. A loaded chaos run answered 500 "internal error: failed to connect to `user=postgres
// ...`" about 130 times while PostgreSQL restarted.
func TestAnUnclassifiedConnectionFailureIsUnavailable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for name, err := range map[string]error{
		"dial refused, wrapped as a driver does": fmt.Errorf("failed to connect to `user=postgres database=postgres`: %w", refused),
		"connection cut mid-answer":              fmt.Errorf("read rides: %w", io.ErrUnexpectedEOF),
		"connection reset":                       fmt.Errorf("query: %w", syscall.ECONNRESET),
	} {
		if got := dispatch.ErrorCode(err); got != dispatch.CodeUnavailable {
			t.Errorf("%s: ErrorCode = %s, want %s", name, got, dispatch.CodeUnavailable)
		}
		if e := dispatch.AsError(err); e.Code != dispatch.CodeUnavailable || !errors.Is(e, err) {
			t.Errorf("%s: AsError = %+v, want unavailable wrapping the error", name, e)
		}
	}
	if got := dispatch.ErrorCode(errors.New("nil map")); got != dispatch.CodeInternal {
		t.Errorf("an unexpected failure: ErrorCode = %s, want internal", got)
	}
	if got := dispatch.ErrorCode(dispatch.Invalid("lat", "must be in [-90, 90]")); got != dispatch.CodeInvalidArgument {
		t.Errorf("a classified error keeps its code: %s", got)
	}
}
