package dispatch

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxIDLen is the longest rider or driver id accepted, in bytes.
const MaxIDLen = 128

// IDPunctuation lists the characters other than ASCII letters and digits a rider or driver id may
// hold (see ValidateID).
const IDPunctuation = "-_.:@+="

// ValidateID checks a rider or driver id: 1..MaxIDLen bytes, each an ASCII letter, an ASCII digit
// or one of IDPunctuation (- _ . : @ + =). Ids become parts of Redis Cluster keys and PostgreSQL
// text, so the set leaves out { and } (hash tags), whitespace, control characters, NUL, non-ASCII
// and therefore invalid UTF-8 (encoding/json turns invalid UTF-8 in a body into U+FFFD, which is
// refused here too). It returns nil or a CodeInvalidArgument *Error on field: "is required" for an
// empty id, "must be at most 128 bytes", or "must contain only ..." naming the first bad character
// and its byte offset.
func ValidateID(field, id string) error {
	if id == "" {
		return Invalid(field, "is required")
	}
	if len(id) > MaxIDLen {
		return Invalid(field, fmt.Sprintf("must be at most %d bytes", MaxIDLen))
	}
	for i := 0; i < len(id); i++ {
		if !isIDByte(id[i]) {
			return Invalid(field, fmt.Sprintf("must contain only ASCII letters, digits and %s, without spaces, braces or control characters (found %s at byte %d)",
				IDPunctuation, describeAt(id, i), i))
		}
	}
	return nil
}

func isIDByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	for i := 0; i < len(IDPunctuation); i++ {
		if c == IDPunctuation[i] {
			return true
		}
	}
	return false
}

// describeAt names the character at byte i of s for an error message without echoing raw bytes:
// 'x' quoted for a printable character, U+XXXX otherwise, "invalid UTF-8 byte 0xNN" for a byte that
// starts no valid UTF-8 sequence.
func describeAt(s string, i int) string {
	r, size := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("invalid UTF-8 byte 0x%02x", s[i])
	case unicode.IsPrint(r) && r != ' ':
		return fmt.Sprintf("%q", r)
	}
	return fmt.Sprintf("%U", r)
}

// ValidateRideID checks a ride id: a UUID in its canonical form, 36 bytes of lower-case hex digits
// and hyphens (8-4-4-4-12), as flagdown creates them (order-create, uuid.NewString). Upper-case,
// braced, urn:uuid: and hyphen-less spellings are refused, so one ride has one spelling. It returns
// nil or a CodeInvalidArgument *Error on field: "is required" for an empty id, "must be a ride id
// ..." otherwise (the value is not echoed).
func ValidateRideID(field, id string) error {
	if id == "" {
		return Invalid(field, "is required")
	}
	if len(id) == 36 {
		if u, err := uuid.Parse(id); err == nil && u.String() == id {
			return nil
		}
	}
	return Invalid(field, "must be a ride id: a lower-case UUID such as 5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11")
}

// ValidateText checks free text and header or attribute values: at most maxBytes bytes (UTF-8
// bytes, not characters), valid UTF-8, and no control characters (unicode.IsControl: NUL and the
// rest of U+0000..U+001F including tab and newline, U+007F, U+0080..U+009F). The empty string
// passes; callers that need a value check for it. It returns nil or a CodeInvalidArgument *Error on
// field: "must be at most N bytes", "must be valid UTF-8", or "must not contain NUL or other
// control characters" naming the first one and its byte offset.
func ValidateText(field, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return Invalid(field, fmt.Sprintf("must be at most %d bytes", maxBytes))
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "must be valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return Invalid(field, fmt.Sprintf("must not contain NUL or other control characters (found %U at byte %d)", r, i))
		}
	}
	return nil
}
