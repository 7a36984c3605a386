// Package cloudevent is the CloudEvents HTTP codec every event-triggered function uses: it decodes an
// incoming request in binary or structured mode into a validated flagdown event, decodes event data
// strictly into a payload type, and builds new events.
//
// Every decoding failure is a *dispatch.Error: CodeInvalidArgument with Field naming the offending
// attribute (type, source, id, subject, specversion, data), or CodeTooLarge when the body is larger
// than the limit.
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
// JSON data (datacontenttype application/json, or none with data that is valid JSON). A body over
// the limit gives a CodeTooLarge error; every other failure gives a CodeInvalidArgument error whose
// Field names the attribute: type, source, id, subject, specversion or data.
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
	return nil
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
		keys := make([]string, 0, len(ve))
		for k := range ve {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool {
			return rank(keys[i]) < rank(keys[j]) || (rank(keys[i]) == rank(keys[j]) && keys[i] < keys[j])
		})
		field := keys[0]
		rule := ve[field].Error()
		if field == "datacontenttype" {
			field = "data"
			rule = "datacontenttype: " + rule
		}
		return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: field, Message: field + ": " + rule, Err: err}
	}
	msg := err.Error()
	field := "data"
	for _, f := range fieldOrder {
		if strings.Contains(msg, f) {
			field = f
			break
		}
	}
	if field == "datacontenttype" || field == "dataschema" {
		field = "data"
	}
	return &dispatch.Error{Code: dispatch.CodeInvalidArgument, Field: field,
		Message: field + ": not a valid CloudEvent: " + msg, Err: err}
}

func rank(field string) int {
	for i, f := range fieldOrder {
		if f == field {
			return i
		}
	}
	return len(fieldOrder)
}

// Check applies flagdown's rules to an event: CloudEvents 1.0 validity, specversion 1.0, a subject,
// a type listed in events.Types, and JSON data (datacontenttype application/json or unset with data
// that is valid JSON). It returns a CodeInvalidArgument *dispatch.Error naming the field, or nil.
func Check(e event.Event) error {
	if err := e.Validate(); err != nil {
		return invalidFromSDK(err)
	}
	if v := e.SpecVersion(); v != SpecVersion {
		return dispatch.Invalid("specversion", fmt.Sprintf("must be %q, got %q", SpecVersion, v))
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
