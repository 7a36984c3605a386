package dispatch_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// checkRule asserts that err is nil when valid, and otherwise an invalid_argument error on field
// whose message starts with the field, contains rule and carries no raw control or invalid bytes.
func checkRule(t *testing.T, err error, valid bool, field, rule string) {
	t.Helper()
	if got, want := err == nil, valid; got != want {
		t.Fatalf("valid = %v, want %v (%v)", got, want, err)
	}
	if err == nil {
		return
	}
	e := dispatch.AsError(err)
	if e.Code != dispatch.CodeInvalidArgument || e.Field != field {
		t.Errorf("got %s on %q, want invalid_argument on %q", e.Code, e.Field, field)
	}
	if !strings.HasPrefix(e.Message, field+": ") || !strings.Contains(e.Message, rule) {
		t.Errorf("message %q should start with %q and contain %q", e.Message, field+": ", rule)
	}
	if !utf8.ValidString(e.Message) || strings.IndexFunc(e.Message, unicode.IsControl) >= 0 {
		t.Errorf("message %q echoes raw control or invalid bytes", e.Message)
	}
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		rule string // "" when valid
	}{
		{"a test driver id", "d-7", ""},
		{"a test rider id", "r-123", ""},
		{"a uuid", uuid.NewString(), ""},
		{"an upper-case uuid", strings.ToUpper(uuid.NewString()), ""},
		{"a replay driver id", "replay-42-k3x9z-d7", ""},
		{"a replay rider id with a negative seed", "replay--3-run_1-12", ""},
		{"every allowed punctuation", "a-b_c.d:e@f+g=h", ""},
		{"all letters and digits", "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", ""},
		{"exactly MaxIDLen bytes", strings.Repeat("x", dispatch.MaxIDLen), ""},
		{"empty", "", "is required"},
		{"one byte over MaxIDLen", strings.Repeat("x", dispatch.MaxIDLen+1), "at most 128 bytes"},
		{"a space", "d 1", "found U+0020 at byte 1"},
		{"a tab", "d\t1", "found U+0009 at byte 1"},
		{"a newline", "d\n1", "found U+000A"},
		{"NUL", "d\x001", "found U+0000 at byte 1"},
		{"DEL", "d\x7f", "found U+007F"},
		{"an opening brace (Redis Cluster hash tag)", "d{1", "found '{' at byte 1"},
		{"a closing brace", "d}1", "found '}'"},
		{"a whole hash tag", "{d-1}", "found '{' at byte 0"},
		{"a slash", "d/1", "found '/'"},
		{"a hash sign", "d#1", "found '#'"},
		{"a quote", `d"1`, `found '"'`},
		{"non-ASCII letters", "司机-7", "found '司' at byte 0"},
		{"U+FFFD, what encoding/json makes of invalid UTF-8", "d\uFFFD", "found '\uFFFD' at byte 1"},
		{"an invalid UTF-8 byte", "d\xff1", "invalid UTF-8 byte 0xff at byte 1"},
		{"a truncated UTF-8 sequence", "d\xe5\x8f", "invalid UTF-8 byte 0xe5"},
		{"a no-break space", "d\u00a01", "found U+00A0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := dispatch.ValidateID("driver_id", tc.id)
			checkRule(t, err, tc.rule == "", "driver_id", tc.rule)
			if err != nil && tc.rule != "is required" && tc.rule != "at most 128 bytes" {
				checkRule(t, err, false, "driver_id", "must contain only ASCII letters, digits and -_.:@+=")
			}
		})
	}
}

func TestValidateRideID(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	tests := []struct {
		name string
		id   string
		rule string
	}{
		{"a new ride id", id, ""},
		{"the nil uuid", "00000000-0000-0000-0000-000000000000", ""},
		{"a version 4 uuid", "5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11", ""},
		{"empty", "", "is required"},
		{"upper case", strings.ToUpper(id), "lower-case UUID"},
		{"braced", "{" + id + "}", "lower-case UUID"},
		{"urn form", "urn:uuid:" + id, "lower-case UUID"},
		{"without hyphens", strings.ReplaceAll(id, "-", ""), "lower-case UUID"},
		{"not a uuid", "nope", "lower-case UUID"},
		{"a driver id", "d-7", "lower-case UUID"},
		{"one character short", id[:35], "lower-case UUID"},
		{"one character long", id + "0", "lower-case UUID"},
		{"NUL inside", id[:8] + "\x00" + id[9:], "lower-case UUID"},
		{"NUL after", id + "\x00", "lower-case UUID"},
		{"invalid UTF-8", id[:35] + "\xff", "lower-case UUID"},
		{"a non-hex digit", "g" + id[1:], "lower-case UUID"},
		{"a hyphen moved", id[:7] + "-" + id[7:8] + id[9:], "lower-case UUID"},
		{"over-long", strings.Repeat(id, 100), "lower-case UUID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkRule(t, dispatch.ValidateRideID("ride_id", tc.id), tc.rule == "", "ride_id", tc.rule)
		})
	}
}

func TestValidateText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    string
		max  int
		rule string
	}{
		{"empty", "", 10, ""},
		{"plain text", "changed my mind", 500, ""},
		{"non-ASCII text", "Fahrer kommt nicht, 司机没来 🚕", 500, ""},
		{"braces and punctuation", "{key}/with #stuff", 500, ""},
		{"U+FFFD", "bad \uFFFD byte", 500, ""},
		{"exactly max bytes", strings.Repeat("é", 5), 10, ""},
		{"one byte over max", strings.Repeat("é", 5) + "x", 10, "must be at most 10 bytes"},
		{"max counts bytes not characters", strings.Repeat("é", 6), 10, "must be at most 10 bytes"},
		{"NUL", "a\x00b", 500, "NUL or other control characters (found U+0000 at byte 1)"},
		{"a tab", "a\tb", 500, "found U+0009"},
		{"a newline", "line\nbreak", 500, "found U+000A at byte 4"},
		{"a carriage return", "a\rb", 500, "found U+000D"},
		{"an escape", "a\x1b[31m", 500, "found U+001B"},
		{"DEL", "a\x7f", 500, "found U+007F"},
		{"a C1 control", "a\u0085b", 500, "found U+0085"},
		{"an invalid UTF-8 byte", "a\xffb", 500, "must be valid UTF-8"},
		{"a truncated UTF-8 sequence", "a\xe5\x8f", 500, "must be valid UTF-8"},
		{"an encoded surrogate", "a\xed\xa0\x80", 500, "must be valid UTF-8"},
		{"over-long and invalid: the length is reported", strings.Repeat("\x00", 600), 500, "must be at most 500 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkRule(t, dispatch.ValidateText("reason", tc.s, tc.max), tc.rule == "", "reason", tc.rule)
		})
	}
}

func ExampleValidateID() {
	fmt.Println(dispatch.ValidateID("driver_id", "d-7"))
	fmt.Println(dispatch.ValidateID("driver_id", "{d-7}"))
	// Output:
	// <nil>
	// invalid_argument: driver_id: must contain only ASCII letters, digits and -_.:@+=, without spaces, braces or control characters (found '{' at byte 0)
}
