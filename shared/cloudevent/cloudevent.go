// Package cloudevent is the CloudEvents HTTP codec every event-triggered function uses: it decodes an
// incoming request in binary or structured mode into a validated flagdown event, decodes event data
// strictly into a payload type, and builds new events.
//
// Every decoding failure is a *dispatch.Error: CodeInvalidArgument with Field naming the offending
// attribute (type, source, id, subject, specversion, data, or an extension's name), or CodeTooLarge
// when the body is larger than the limit. Attribute values must be valid UTF-8 without NUL or other
// control characters and within the byte limits below (dispatch.ValidateText), in binary and
// structured mode alike; the CloudEvents SDK checks none of this for id, subject and extensions.
package cloudevent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/shared/dispatch"
)

// DefaultMaxBodyBytes is the body limit FromRequest applies, in bytes. It equals the default of
// FLAGDOWN_MAX_BODY_BYTES (config.Config.MaxBodyBytes); use FromRequestLimit to apply the configured value.
const DefaultMaxBodyBytes int64 = 262144

// SpecVersion is the only CloudEvents specification version flagdown accepts and produces.
const SpecVersion = event.CloudEventsVersionV1

// ContentTypeJSON is the datacontenttype of every flagdown event.
const ContentTypeJSON = "application/json"

// ContentTypeStructured is the HTTP Content-Type of a structured-mode CloudEvent in JSON format.
const ContentTypeStructured = "application/cloudevents+json"

// Limits of attribute values, in bytes of UTF-8, checked by FromRequestLimit and Check together
// with dispatch.ValidateText's rules (valid UTF-8, no NUL or other control characters).
const (
	// MaxIDBytes limits id.
	MaxIDBytes = 256
	// MaxTypeBytes limits type.
	MaxTypeBytes = 256
	// MaxSubjectBytes limits subject: a ride or driver id, or for Redis expiry events a key (the
	// FLAGDOWN_REDIS_PREFIX, a kind and an id of at most dispatch.MaxIDLen bytes).
	MaxSubjectBytes = 512
	// MaxSourceBytes limits source.
	MaxSourceBytes = 1024
	// MaxAttributeBytes limits every other attribute (specversion, time, datacontenttype,
	// dataschema) and the value of every extension attribute.
	MaxAttributeBytes = 1024
)

// attributeLimit is the byte limit of the attribute named name.
func attributeLimit(name string) int {
	switch name {
	case "id":
		return MaxIDBytes
	case "type":
		return MaxTypeBytes
	case "subject":
		return MaxSubjectBytes
	case "source":
		return MaxSourceBytes
	}
	return MaxAttributeBytes
}

// checkAttribute applies dispatch.ValidateText with the attribute's limit; the error names the attribute.
func checkAttribute(name, value string) error {
	return dispatch.ValidateText(name, value, attributeLimit(name))
}

// stringAttributes are the context attributes whose JSON form is a string (CloudEvents 1.0 JSON
// format); extension attributes may also be numbers or booleans.
var stringAttributes = map[string]bool{
	"specversion": true, "id": true, "source": true, "type": true, "subject": true,
	"datacontenttype": true, "dataschema": true, "time": true,
}

// FromRequest decodes r as a CloudEvent with a body limit of DefaultMaxBodyBytes bytes.
// See FromRequestLimit.
func FromRequest(r *http.Request) (event.Event, error) {
	return FromRequestLimit(r, DefaultMaxBodyBytes)
}

// FromRequestLimit decodes r, a CloudEvents HTTP request in binary mode (ce-* headers, data in the
// body) or structured mode (Content-Type application/cloudevents+json), reading at most maxBytes bytes
// of body (maxBytes <= 0 means DefaultMaxBodyBytes).
//
// The event must be a valid CloudEvents 1.0 event with a subject, a type listed in events.Types and
// JSON data (datacontenttype application/json, or none with data that is valid JSON), and every
// attribute value (ce-* header, or member of the structured envelope) must be valid UTF-8 without
// NUL or other control characters and within its limit (MaxIDBytes, ...); in structured mode the
// context attributes must be JSON strings. A body over the limit gives a CodeTooLarge error; every
// other failure gives a CodeInvalidArgument error whose Field names the attribute: type, source, id,
// subject, specversion, time, an extension's name, or data.
func FromRequestLimit(r *http.Request, maxBytes int64) (event.Event, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBodyBytes
	}
	body, err := readBody(r, maxBytes)
	if err != nil {
		return event.Event{}, err
	}

	ct := r.Header.Get("Content-Type")
	mediaType, _, _ := mime.ParseMediaType(ct)
	var e *event.Event
	switch {
	case mediaType == "application/cloudevents-batch+json":
		return event.Event{}, dispatch.Invalid("specversion", "batched CloudEvents are not supported, send one event per request")
	case strings.HasPrefix(mediaType, "application/cloudevents"):
		if mediaType != ContentTypeStructured {
			return event.Event{}, dispatch.Invalid("specversion", fmt.Sprintf("structured mode needs Content-Type %s, got %q", ContentTypeStructured, mediaType))
		}
		if err := checkStructured(body); err != nil {
			return event.Event{}, err
		}
		e, err = toEvent(r, body)
		if err != nil {
			return event.Event{}, err
		}
	case r.Header.Get("Ce-Specversion") != "":
		if v := r.Header.Get("Ce-Specversion"); v != SpecVersion {
			return event.Event{}, dispatch.Invalid("specversion", fmt.Sprintf("must be %q, got %q", SpecVersion, v))
		}
		if err := checkHeaders(r.Header); err != nil {
			return event.Event{}, err
		}
		e, err = toEvent(r, body)
		if err != nil {
			return event.Event{}, err
		}
	default:
		return event.Event{}, dispatch.Invalid("specversion", "not a CloudEvent: binary mode needs a ce-specversion header, "+
			"structured mode a Content-Type of "+ContentTypeStructured)
	}
	if err := Check(*e); err != nil {
		return event.Event{}, err
	}
	return *e, nil
}

// readBody reads the whole body of r, failing with CodeTooLarge beyond maxBytes bytes.
func readBody(r *http.Request, maxBytes int64) ([]byte, error) {
	tooLarge := &dispatch.Error{Code: dispatch.CodeTooLarge, Field: "data",
		Message: fmt.Sprintf("request body is larger than %d bytes", maxBytes)}
	if r.ContentLength > maxBytes {
		return nil, tooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, tooLarge
		}
		return nil, &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: "data",
			Message: "data: the request body could not be read", Err: err}
	}
	if int64(len(body)) > maxBytes {
		return nil, tooLarge
	}
	return body, nil
}

// checkStructured checks the structured-mode envelope before the SDK parses it, so that malformed
// JSON and a wrong specversion are reported with the right field.
func checkStructured(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return dispatch.Invalid("data", "structured event body is empty")
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: "data",
			Message: "data: structured event body is not a valid JSON object: " + err.Error(), Err: err}
	}
	raw, ok := env["specversion"]
	if !ok {
		return dispatch.Invalid("specversion", "is required")
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil || v != SpecVersion {
		return dispatch.Invalid("specversion", fmt.Sprintf("must be %q, got %s", SpecVersion, string(raw)))
	}
	if _, ok := env["data_base64"]; ok {
		return dispatch.Invalid("data", "must be JSON in the data member, not data_base64")
	}
	for _, name := range byRank(env) {
		raw := env[name]
		// The raw bytes are checked: decoding a JSON string replaces invalid UTF-8 with U+FFFD.
		if !utf8.Valid(raw) {
			return dispatch.Invalid(name, "must be valid UTF-8")
		}
		if name == "data" || bytes.Equal(raw, []byte("null")) {
			continue
		}
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			if stringAttributes[name] {
				return dispatch.Invalid(name, "must be a JSON string")
			}
			continue // an extension holding a number or a boolean
		}
		if err := checkAttribute(name, v); err != nil {
			return err
		}
	}
	if !utf8.Valid(body) {
		// Only a member name is left to hold the invalid bytes.
		return dispatch.Invalid("data", "structured event body must be valid UTF-8")
	}
	return nil
}

// checkHeaders applies the attribute rules to the ce-* headers of a binary-mode request before the
// SDK reads them (it accepts NUL, control characters and invalid UTF-8 in id, subject and
// extensions, and reports a bad source or time under no attribute's name).
func checkHeaders(h http.Header) error {
	values := map[string][]string{}
	for k, vs := range h {
		if name, ok := strings.CutPrefix(strings.ToLower(k), "ce-"); ok {
			values[name] = vs
		}
	}
	for _, name := range byRank(values) {
		for _, v := range values[name] {
			if err := checkAttribute(name, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// byRank returns the keys of m in fieldOrder, then the others (extensions) by name.
func byRank[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return rank(keys[i]) < rank(keys[j]) || (rank(keys[i]) == rank(keys[j]) && keys[i] < keys[j])
	})
	return keys
}

// toEvent runs the SDK's binding over the buffered body.
func toEvent(r *http.Request, body []byte) (*event.Event, error) {
	msg := cehttp.NewMessage(r.Header, io.NopCloser(bytes.NewReader(body)))
	e, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		return nil, invalidFromSDK(err)
	}
	return e, nil
}

// fieldOrder is the order in which the first failing attribute is reported.
var fieldOrder = []string{"specversion", "id", "source", "type", "subject", "datacontenttype", "time", "dataschema", "data"}

// invalidFromSDK turns an SDK decoding or validation error into an invalid_argument error naming the
// attribute (the first one in fieldOrder when several are wrong).
func invalidFromSDK(err error) error {
	var ve event.ValidationError
	if errors.As(err, &ve) && len(ve) > 0 {
		field := byRank(ve)[0]
		rule := ve[field].Error()
		if field == "datacontenttype" {
			field = "data"
			rule = "datacontenttype: " + rule
		}
		return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: field, Message: field + ": " + rule, Err: err}
	}
	msg := err.Error()
	field := firstMentioned(msg)
	if field == "" || field == "datacontenttype" || field == "dataschema" {
		field = "data"
	}
	return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: field,
		Message: field + ": not a valid CloudEvent: " + msg, Err: err}
}

// firstMentioned returns the attribute of fieldOrder whose name occurs first in msg as a whole word
// ("invalid value for time" names time, not id), or "" when none does.
func firstMentioned(msg string) string {
	best, bestAt := "", len(msg)
	for _, f := range fieldOrder {
		for from := 0; from < len(msg); {
			i := strings.Index(msg[from:], f)
			if i < 0 {
				break
			}
			i += from
			end := i + len(f)
			if (i == 0 || !isWordByte(msg[i-1])) && (end == len(msg) || !isWordByte(msg[end])) {
				if i < bestAt {
					best, bestAt = f, i
				}
				break
			}
			from = end
		}
	}
	return best
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func rank(field string) int {
	for i, f := range fieldOrder {
		if f == field {
			return i
		}
	}
	return len(fieldOrder)
}

// Check applies flagdown's rules to an event: CloudEvents 1.0 validity, specversion 1.0, id, source,
// type, subject and string extension values that pass dispatch.ValidateText within their limits
// (MaxIDBytes, MaxSourceBytes, MaxTypeBytes, MaxSubjectBytes, MaxAttributeBytes), a subject, a type
// listed in events.Types, and JSON data in valid UTF-8 (datacontenttype application/json or unset
// with data that is valid JSON). It returns a CodeInvalidArgument *dispatch.Error naming the field
// (the attribute, an extension's name, or data), or nil.
func Check(e event.Event) error {
	if err := e.Validate(); err != nil {
		return invalidFromSDK(err)
	}
	if v := e.SpecVersion(); v != SpecVersion {
		return dispatch.Invalid("specversion", fmt.Sprintf("must be %q, got %q", SpecVersion, v))
	}
	for _, a := range [...]struct{ name, value string }{
		{"id", e.ID()}, {"source", e.Source()}, {"type", e.Type()}, {"subject", e.Subject()},
	} {
		if err := checkAttribute(a.name, a.value); err != nil {
			return err
		}
	}
	exts := e.Extensions()
	for _, name := range byRank(exts) {
		if v, ok := exts[name].(string); ok {
			if err := checkAttribute(name, v); err != nil {
				return err
			}
		}
	}
	if e.Subject() == "" {
		return dispatch.Invalid("subject", "is required (the ride or driver id)")
	}
	if !events.Known(e.Type()) {
		return dispatch.Invalid("type", fmt.Sprintf("unknown event type %q", e.Type()))
	}
	if ct := e.DataContentType(); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != ContentTypeJSON {
			return dispatch.Invalid("data", fmt.Sprintf("datacontenttype must be %s, got %q", ContentTypeJSON, ct))
		}
	}
	if e.DataBase64 {
		return dispatch.Invalid("data", "must be JSON, not base64")
	}
	data := e.Data()
	if len(bytes.TrimSpace(data)) == 0 {
		return dispatch.Invalid("data", "is required (a JSON payload)")
	}
	if !utf8.Valid(data) {
		// encoding/json would silently turn the invalid bytes into U+FFFD.
		return dispatch.Invalid("data", "must be valid UTF-8")
	}
	if !json.Valid(data) {
		return dispatch.Invalid("data", "is not valid JSON")
	}
	return nil
}

// DecodeData decodes the JSON data of e into v strictly: unknown fields, trailing data after the
// JSON value and type mismatches are rejected with a CodeInvalidArgument error on field data.
func DecodeData(e event.Event, v any) error {
	data := e.Data()
	if len(bytes.TrimSpace(data)) == 0 {
		return dispatch.Invalid("data", "is required (a JSON payload)")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: "data",
			Message: "data: " + describeJSONError(err), Err: err}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return dispatch.Invalid("data", "unexpected data after the JSON value")
	}
	return nil
}

// describeJSONError turns an encoding/json error into a short rule for callers.
func describeJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return "malformed JSON at byte " + strconv.FormatInt(se.Offset, 10) + ": " + se.Error()
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("%s must be a JSON %s, got %s", te.Field, te.Type.Kind(), te.Value)
		}
		return fmt.Sprintf("must be a JSON %s, got %s", te.Type.Kind(), te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	default:
		return err.Error()
	}
}

// New builds a CloudEvents 1.0 event with datacontenttype application/json. data is used as is when
// it is a json.RawMessage or []byte (it must be valid JSON) and marshalled otherwise. A zero at means
// now; the time is stored in UTC. The event is validated (id, source and type are required); the type
// is not checked against events.Types so that tools can build any event.
func New(id, typ, source, subject string, data any, at time.Time) (event.Event, error) {
	var raw []byte
	switch d := data.(type) {
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		b, err := json.Marshal(d)
		if err != nil {
			return event.Event{}, fmt.Errorf("cloudevent: marshal data of %s %s: %w", typ, id, err)
		}
		raw = b
	}
	if !json.Valid(raw) {
		return event.Event{}, fmt.Errorf("cloudevent: data of %s %s is not valid JSON", typ, id)
	}
	if at.IsZero() {
		at = time.Now()
	}
	e := event.New(SpecVersion)
	e.SetID(id)
	e.SetType(typ)
	e.SetSource(source)
	e.SetSubject(subject)
	e.SetTime(at.UTC())
	// Set the encoded JSON directly: SetData with []byte would mark the data as base64.
	e.SetDataContentType(ContentTypeJSON)
	e.DataEncoded = append([]byte(nil), raw...)
	e.DataBase64 = false
	if err := e.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("cloudevent: invalid event %s %s: %w", typ, id, err)
	}
	return e, nil
}
