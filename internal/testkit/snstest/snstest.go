// Package snstest is an in-memory stand-in for Amazon SNS's mobile push API, for tests: an httptest
// server that speaks SNS's wire protocol (the AWS Query protocol, version 2010-03-31: form-encoded
// POSTs signed with Signature Version 4, answered in SNS's XML) for the actions flagdown uses:
// CreatePlatformEndpoint, GetEndpointAttributes, SetEndpointAttributes, DeleteEndpoint and Publish.
//
// It verifies every request's SigV4 signature against the test credentials (AccessKeyID,
// SecretAccessKey, Region, service sns) and answers 403 to a request that is unsigned or wrongly
// signed. It records every request it received, parsed and with its raw form, keeps the platform
// endpoints it created with their attributes and the payload each publish delivered to them, and can
// be told to answer an error for an endpoint ARN (FailEndpoint) or to disable an endpoint as SNS does
// when the push service refuses its token (SetEndpointEnabled).
//
// Point a real service/sns client at URL (BaseEndpoint) with the credentials above (ConfigOptions).
package snstest

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/uuid"
)

// Test credentials and location: requests must be signed with these, for service sns in Region.
const (
	// AccessKeyID is the access key id requests must be signed with.
	AccessKeyID = "AKIDSNSTEST0EXAMPLE1"
	// SecretAccessKey is the secret key requests must be signed with.
	SecretAccessKey = "snstest/secret/key/0123456789abcdefEXAMPLE"
	// Region is the region requests must be signed for; every ARN of the server is in it.
	Region = "us-east-1"
	// Account is the AWS account id of every ARN of the server.
	Account = "123456789012"
	// Version is the SNS API version every request must name.
	Version = "2010-03-31"
	// XMLNS is the XML namespace of every SNS response.
	XMLNS = "http://sns.amazonaws.com/doc/2010-03-31/"
)

// ConfigOptions are the aws-sdk-go-v2/config load options of a client of the server: the test
// credentials, Region, and no shared config or credentials files (a developer's own are not read).
func ConfigOptions() []func(*awsconfig.LoadOptions) error {
	return []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(Region),
		awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, "")),
		awsconfig.WithSharedConfigFiles([]string{}),
		awsconfig.WithSharedCredentialsFiles([]string{}),
	}
}

// AppARN returns the ARN of platform application name on platform (GCM, APNS, APNS_SANDBOX) in the
// server's region and account. Every well-formed application ARN of that region and account exists.
func AppARN(platform, name string) string {
	return fmt.Sprintf("arn:aws:sns:%s:%s:app/%s/%s", Region, Account, platform, name)
}

// Request is one request the server received.
type Request struct {
	// Action is the form's Action (CreatePlatformEndpoint, Publish, ...).
	Action string
	// Form is the raw decoded form body, every field as sent.
	Form url.Values
	// Params are the form's scalar fields (PlatformApplicationArn, Token, TargetArn, Message, ...),
	// without Action, Version and the map entries parsed below.
	Params map[string]string
	// Attributes are the Attributes.entry.N.key/value pairs (CreatePlatformEndpoint, SetEndpointAttributes).
	Attributes map[string]string
	// MessageAttributes are the MessageAttributes.entry.N.* entries of a Publish, by name.
	MessageAttributes map[string]MessageAttribute
	// Auth is the request's parsed SigV4 Authorization header.
	Auth Authorization
	// Header is the request's HTTP header.
	Header http.Header
}

// MessageAttribute is one message attribute of a Publish.
type MessageAttribute struct {
	// DataType is String, Number, Binary or String.Array.
	DataType string
	// StringValue is the value of a String, Number or String.Array attribute.
	StringValue string
	// BinaryValue is the base64 value of a Binary attribute, as sent.
	BinaryValue string
}

// Authorization is a parsed SigV4 Authorization header.
type Authorization struct {
	// Algorithm is AWS4-HMAC-SHA256.
	Algorithm string
	// AccessKeyID, Date (yyyymmdd), Region and Service are the credential scope.
	AccessKeyID, Date, Region, Service string
	// SignedHeaders are the lower-case names of the signed headers, sorted.
	SignedHeaders []string
	// Signature is the hex signature.
	Signature string
}

// Endpoint is a platform endpoint the server holds.
type Endpoint struct {
	// ARN is arn:aws:sns:<region>:<account>:endpoint/<platform>/<app>/<id>.
	ARN string
	// ApplicationARN is the platform application the endpoint belongs to.
	ApplicationARN string
	// Platform is the application's platform: GCM, APNS or APNS_SANDBOX.
	Platform string
	// Attributes are Enabled ("true" or "false"), Token and CustomUserData when set.
	Attributes map[string]string
	// Delivered are the payloads Publish handed to the push service for this endpoint, oldest first:
	// the message of the endpoint's platform key when MessageStructure is json, else the message.
	Delivered []string
}

// Failure is an error the server answers: an HTTP status and SNS's error code and message.
type Failure struct {
	// Status is the HTTP status (see StatusOf).
	Status int
	// Code is SNS's error code (EndpointDisabled, NotFound, InvalidParameter, Throttled, ...).
	Code string
	// Message is the error's message.
	Message string
}

// statuses maps SNS error codes to the HTTP status SNS answers them with.
var statuses = map[string]int{
	"InvalidParameter":            http.StatusBadRequest,
	"InvalidParameterValue":       http.StatusBadRequest,
	"EndpointDisabled":            http.StatusBadRequest,
	"PlatformApplicationDisabled": http.StatusBadRequest,
	"InvalidAction":               http.StatusBadRequest,
	"IncompleteSignature":         http.StatusBadRequest,
	"NotFound":                    http.StatusNotFound,
	"AuthorizationError":          http.StatusForbidden,
	"MissingAuthenticationToken":  http.StatusForbidden,
	"InvalidClientTokenId":        http.StatusForbidden,
	"SignatureDoesNotMatch":       http.StatusForbidden,
	"Throttled":                   http.StatusTooManyRequests,
	"InternalError":               http.StatusInternalServerError,
}

// StatusOf returns the HTTP status SNS answers error code with (400 for codes it does not know).
func StatusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusBadRequest
}

var defaultMessages = map[string]string{
	"EndpointDisabled": "Endpoint is disabled",
	"NotFound":         "Endpoint does not exist",
	"Throttled":        "Rate exceeded",
	"InternalError":    "Internal Error",
}

// Server is the SNS stand-in. Its methods are safe for concurrent use.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port), the client's BaseEndpoint.
	URL string

	mu        sync.Mutex
	requests  []Request
	endpoints map[string]*Endpoint
	failures  map[string]Failure
}

// New starts a server, closed when t ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{endpoints: map[string]*Endpoint{}, failures: map[string]Failure{}}
	hs := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(hs.Close)
	s.URL = hs.URL
	return s
}

// Requests returns every request received so far, oldest first (signature failures included).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// RequestsOf returns the requests received so far with Action action, oldest first.
func (s *Server) RequestsOf(action string) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Action == action {
			out = append(out, r)
		}
	}
	return out
}

// Endpoint returns a copy of the endpoint arn and whether it exists.
func (s *Server) Endpoint(arn string) (Endpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[arn]
	if !ok {
		return Endpoint{}, false
	}
	return copyEndpoint(e), true
}

// Endpoints returns copies of every endpoint, sorted by ARN.
func (s *Server) Endpoints() []Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Endpoint, 0, len(s.endpoints))
	for _, e := range s.endpoints {
		out = append(out, copyEndpoint(e))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ARN < out[j].ARN })
	return out
}

func copyEndpoint(e *Endpoint) Endpoint {
	c := *e
	c.Attributes = map[string]string{}
	for k, v := range e.Attributes {
		c.Attributes[k] = v
	}
	c.Delivered = slices.Clone(e.Delivered)
	return c
}

// SetEndpointEnabled sets the Enabled attribute of endpoint arn, as SNS does (false) when the push
// service reports the token invalid; a publish to a disabled endpoint answers EndpointDisabled.
// It reports whether the endpoint exists.
func (s *Server) SetEndpointEnabled(arn string, enabled bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.endpoints[arn]
	if ok {
		e.Attributes["Enabled"] = strconv.FormatBool(enabled)
	}
	return ok
}

// RemoveEndpoint deletes endpoint arn behind the client's back (someone deleted it in SNS); later
// requests naming it answer NotFound. It reports whether the endpoint existed.
func (s *Server) RemoveEndpoint(arn string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.endpoints[arn]
	delete(s.endpoints, arn)
	return ok
}

// FailEndpoint makes every later request naming arn (as TargetArn or EndpointArn) answer error code
// with SNS's status for it (StatusOf) and message (a default message when empty), until
// ClearFailure. The request is still recorded.
func (s *Server) FailEndpoint(arn, code, message string) {
	if message == "" {
		message = defaultMessages[code]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[arn] = Failure{Status: StatusOf(code), Code: code, Message: message}
}

// ClearFailure undoes FailEndpoint for arn.
func (s *Server) ClearFailure(arn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.failures, arn)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, Failure{Status: 400, Code: "InvalidParameter", Message: "unreadable body"})
		return
	}
	form, _ := url.ParseQuery(string(body))
	req := parse(form, r.Header)
	auth, authErr := verifySignature(r, body)
	req.Auth = auth
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	switch {
	case authErr != nil:
		writeError(w, *authErr)
		return
	case r.Method != http.MethodPost || r.URL.Path != "/":
		writeError(w, Failure{Status: 400, Code: "InvalidAction", Message: "SNS takes POST /"})
		return
	case !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded"):
		writeError(w, Failure{Status: 400, Code: "InvalidParameter", Message: "Content-Type must be application/x-www-form-urlencoded"})
		return
	case form.Get("Version") != Version:
		writeError(w, Failure{Status: 400, Code: "InvalidAction", Message: "Version must be " + Version})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, name := range []string{"TargetArn", "EndpointArn"} {
		if f, ok := s.failures[req.Params[name]]; ok && req.Params[name] != "" {
			writeError(w, f)
			return
		}
	}
	var result string
	var fail *Failure
	switch req.Action {
	case "CreatePlatformEndpoint":
		result, fail = s.createPlatformEndpoint(req)
	case "GetEndpointAttributes":
		result, fail = s.getEndpointAttributes(req)
	case "SetEndpointAttributes":
		result, fail = s.setEndpointAttributes(req)
	case "DeleteEndpoint":
		result, fail = s.deleteEndpoint(req)
	case "Publish":
		result, fail = s.publish(req)
	default:
		fail = &Failure{Status: 400, Code: "InvalidAction", Message: fmt.Sprintf("Could not find operation %s for version %s", req.Action, Version)}
	}
	if fail != nil {
		writeError(w, *fail)
		return
	}
	writeResult(w, req.Action, result)
}

// parse splits form into the Request's scalar params and attribute maps.
func parse(form url.Values, h http.Header) Request {
	req := Request{Action: form.Get("Action"), Form: form, Params: map[string]string{},
		Attributes: map[string]string{}, MessageAttributes: map[string]MessageAttribute{}, Header: h.Clone()}
	attrs := map[string][2]string{}
	msgAttrs := map[string]map[string]string{}
	for k, vs := range form {
		v := vs[0]
		switch {
		case k == "Action" || k == "Version":
		case strings.HasPrefix(k, "Attributes.entry."):
			n, field, _ := strings.Cut(strings.TrimPrefix(k, "Attributes.entry."), ".")
			kv := attrs[n]
			if field == "key" {
				kv[0] = v
			} else if field == "value" {
				kv[1] = v
			}
			attrs[n] = kv
		case strings.HasPrefix(k, "MessageAttributes.entry."):
			n, field, _ := strings.Cut(strings.TrimPrefix(k, "MessageAttributes.entry."), ".")
			if msgAttrs[n] == nil {
				msgAttrs[n] = map[string]string{}
			}
			msgAttrs[n][field] = v
		default:
			req.Params[k] = v
		}
	}
	for _, kv := range attrs {
		req.Attributes[kv[0]] = kv[1]
	}
	for _, m := range msgAttrs {
		req.MessageAttributes[m["Name"]] = MessageAttribute{DataType: m["Value.DataType"],
			StringValue: m["Value.StringValue"], BinaryValue: m["Value.BinaryValue"]}
	}
	return req
}

var (
	appARNRe      = regexp.MustCompile(`^arn:aws:sns:([a-z0-9-]+):([0-9]{12}):app/(GCM|APNS|APNS_SANDBOX)/([A-Za-z0-9_.-]{1,256})$`)
	hexRe         = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	ttlAttrRe     = regexp.MustCompile(`^AWS\.SNS\.MOBILE\.[A-Z_]+\.TTL$`)
	endpointAttrs = map[string]bool{"CustomUserData": true, "Enabled": true, "Token": true}
)

func invalid(msg string) *Failure {
	return &Failure{Status: 400, Code: "InvalidParameter", Message: "Invalid parameter: " + msg}
}

func notFound() *Failure {
	return &Failure{Status: 404, Code: "NotFound", Message: "Endpoint does not exist"}
}

// checkEndpointAttributes applies SNS's rules to endpoint attributes a request sets.
func checkEndpointAttributes(attrs map[string]string) *Failure {
	for k, v := range attrs {
		switch {
		case !endpointAttrs[k]:
			return invalid("Attributes Reason: Invalid attribute name: " + k)
		case k == "Enabled" && v != "true" && v != "false":
			return invalid("Attributes Reason: Enabled must be true or false")
		case k == "CustomUserData" && len(v) > 2048:
			return invalid("CustomUserData Reason: must be at most 2048 bytes")
		}
	}
	return nil
}

// checkToken applies SNS's token rules (the reasons are SNS's own wording).
func checkToken(platform, token string) *Failure {
	switch {
	case token == "":
		return invalid("Token Reason: cannot be empty")
	case len(token) > 8192 || !utf8.ValidString(token):
		return invalid("Token Reason: must be at most 8192 bytes long in UTF-8 encoding")
	case (platform == "APNS" || platform == "APNS_SANDBOX") && (len(token) > 400 || !hexRe.MatchString(token)):
		return invalid("Token Reason: iOS device tokens must be no more than 400 hexadecimal characters")
	}
	return nil
}

func (s *Server) createPlatformEndpoint(req Request) (string, *Failure) {
	app := req.Params["PlatformApplicationArn"]
	m := appARNRe.FindStringSubmatch(app)
	if m == nil || m[1] != Region || m[2] != Account {
		return "", invalid("PlatformApplicationArn Reason: Wrong number of slashes in relative portion of the ARN.")
	}
	platform, token := m[3], req.Params["Token"]
	if f := checkToken(platform, token); f != nil {
		return "", f
	}
	if f := checkEndpointAttributes(req.Attributes); f != nil {
		return "", f
	}
	if _, ok := req.Attributes["Token"]; ok {
		return "", invalid("Attributes Reason: Token is given as the Token parameter")
	}
	want := map[string]string{"CustomUserData": req.Params["CustomUserData"]}
	for k, v := range req.Attributes {
		want[k] = v
	}
	// CreatePlatformEndpoint is idempotent: the same token with the same attributes names the
	// existing endpoint (whatever its Enabled, unless the request sets it); different attributes
	// are an error naming the existing endpoint.
	for _, e := range s.endpoints {
		if e.ApplicationARN != app || e.Attributes["Token"] != token {
			continue
		}
		for k, v := range want {
			if e.Attributes[k] != v {
				return "", invalid(fmt.Sprintf("Token Reason: Endpoint %s already exists with the same Token, but different attributes.", e.ARN))
			}
		}
		return "<EndpointArn>" + xmlText(e.ARN) + "</EndpointArn>", nil
	}
	e := &Endpoint{
		ARN:            fmt.Sprintf("arn:aws:sns:%s:%s:endpoint/%s/%s/%s", Region, Account, platform, m[4], uuid.NewString()),
		ApplicationARN: app, Platform: platform,
		Attributes: map[string]string{"Enabled": "true", "Token": token},
	}
	for k, v := range want {
		if v != "" {
			e.Attributes[k] = v
		}
	}
	s.endpoints[e.ARN] = e
	return "<EndpointArn>" + xmlText(e.ARN) + "</EndpointArn>", nil
}

func (s *Server) getEndpointAttributes(req Request) (string, *Failure) {
	e, ok := s.endpoints[req.Params["EndpointArn"]]
	if !ok {
		return "", notFound()
	}
	keys := make([]string, 0, len(e.Attributes))
	for k := range e.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("<Attributes>")
	for _, k := range keys {
		fmt.Fprintf(&b, "<entry><key>%s</key><value>%s</value></entry>", xmlText(k), xmlText(e.Attributes[k]))
	}
	b.WriteString("</Attributes>")
	return b.String(), nil
}

func (s *Server) setEndpointAttributes(req Request) (string, *Failure) {
	e, ok := s.endpoints[req.Params["EndpointArn"]]
	if !ok {
		return "", notFound()
	}
	if len(req.Attributes) == 0 {
		return "", invalid("Attributes Reason: cannot be empty")
	}
	if f := checkEndpointAttributes(req.Attributes); f != nil {
		return "", f
	}
	if tok, ok := req.Attributes["Token"]; ok {
		if f := checkToken(e.Platform, tok); f != nil {
			return "", f
		}
	}
	for k, v := range req.Attributes {
		e.Attributes[k] = v
	}
	return "", nil
}

func (s *Server) deleteEndpoint(req Request) (string, *Failure) {
	delete(s.endpoints, req.Params["EndpointArn"]) // idempotent, as in SNS
	return "", nil
}

func (s *Server) publish(req Request) (string, *Failure) {
	target := req.Params["TargetArn"]
	if target == "" || req.Params["TopicArn"] != "" || req.Params["PhoneNumber"] != "" {
		return "", invalid("TargetArn Reason: this stand-in publishes to platform endpoints only, named by TargetArn alone")
	}
	e, ok := s.endpoints[target]
	if !ok {
		return "", notFound()
	}
	msg, ok := req.Params["Message"]
	if !ok || msg == "" {
		return "", invalid("Message Reason: cannot be empty")
	}
	for name, a := range req.MessageAttributes {
		switch {
		case a.DataType != "String" && a.DataType != "Number" && a.DataType != "Binary" && a.DataType != "String.Array":
			return "", invalid("MessageAttributes Reason: " + name + " has an unsupported DataType " + a.DataType)
		case a.DataType != "Binary" && a.StringValue == "":
			return "", invalid("MessageAttributes Reason: " + name + " must have a StringValue")
		case ttlAttrRe.MatchString(name):
			if n, err := strconv.ParseInt(a.StringValue, 10, 64); err != nil || n < 0 {
				return "", invalid("MessageAttributes Reason: " + name + " must be a non-negative integer")
			}
		}
	}
	payload := msg
	switch st := req.Params["MessageStructure"]; st {
	case "":
	case "json":
		var m map[string]any
		if err := json.Unmarshal([]byte(msg), &m); err != nil {
			return "", invalid("Message Structure - JSON message body failed to parse")
		}
		def, ok := m["default"].(string)
		if !ok {
			return "", invalid("Message Structure - No default entry in JSON message body")
		}
		payload = def
		if v, ok := m[e.Platform]; ok {
			p, ok := v.(string)
			if !ok {
				return "", invalid("Message Reason: Invalid notification for protocol " + e.Platform + ": the value must be a string")
			}
			if !json.Valid([]byte(p)) {
				return "", invalid("Message Reason: Invalid notification for protocol " + e.Platform + ": Notification is malformed")
			}
			payload = p
		}
	default:
		return "", invalid("MessageStructure Reason: must be json or absent, not " + st)
	}
	if e.Attributes["Enabled"] != "true" {
		return "", &Failure{Status: 400, Code: "EndpointDisabled", Message: "Endpoint is disabled"}
	}
	e.Delivered = append(e.Delivered, payload)
	return "<MessageId>" + uuid.NewString() + "</MessageId>", nil
}

func xmlText(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// writeResult answers action's success: <ActionResponse xmlns=…><ActionResult>result</ActionResult>
// <ResponseMetadata><RequestId>…</RequestId></ResponseMetadata></ActionResponse>. Actions without
// output (SetEndpointAttributes, DeleteEndpoint) carry no Result element, as SNS answers them.
func writeResult(w http.ResponseWriter, action, result string) {
	id := uuid.NewString()
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", id)
	w.WriteHeader(http.StatusOK)
	var b strings.Builder
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">`, action, XMLNS)
	if action != "SetEndpointAttributes" && action != "DeleteEndpoint" {
		fmt.Fprintf(&b, "<%sResult>%s</%sResult>", action, result, action)
	}
	fmt.Fprintf(&b, "<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>", id, action)
	_, _ = io.WriteString(w, b.String())
}

// writeError answers f: <ErrorResponse xmlns=…><Error><Type>Sender|Receiver</Type><Code>…</Code>
// <Message>…</Message></Error><RequestId>…</RequestId></ErrorResponse> with f.Status.
func writeError(w http.ResponseWriter, f Failure) {
	id := uuid.NewString()
	typ := "Sender"
	if f.Status >= 500 {
		typ = "Receiver"
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("x-amzn-RequestId", id)
	w.WriteHeader(f.Status)
	_, _ = fmt.Fprintf(w, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
		XMLNS, typ, xmlText(f.Code), xmlText(f.Message), id)
}

// verifySignature checks r's SigV4 signature (AWS4-HMAC-SHA256, header form) against the test
// credentials for service sns in Region, recomputing it from the canonical request. It returns the
// parsed header and nil, or the failure SNS answers.
func verifySignature(r *http.Request, body []byte) (Authorization, *Failure) {
	var a Authorization
	h := r.Header.Get("Authorization")
	if h == "" {
		return a, &Failure{Status: 403, Code: "MissingAuthenticationToken", Message: "Request is missing Authentication Token"}
	}
	alg, rest, _ := strings.Cut(h, " ")
	a.Algorithm = alg
	for _, part := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			if f := strings.Split(v, "/"); len(f) == 5 && f[4] == "aws4_request" {
				a.AccessKeyID, a.Date, a.Region, a.Service = f[0], f[1], f[2], f[3]
			}
		case "SignedHeaders":
			a.SignedHeaders = strings.Split(v, ";")
		case "Signature":
			a.Signature = v
		}
	}
	amzDate := r.Header.Get("X-Amz-Date")
	switch {
	case alg != "AWS4-HMAC-SHA256" || a.AccessKeyID == "" || len(a.SignedHeaders) == 0 || a.Signature == "":
		return a, &Failure{Status: 400, Code: "IncompleteSignature", Message: "Authorization header must be AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…"}
	case a.Service != "sns" || a.Region != Region:
		return a, &Failure{Status: 403, Code: "SignatureDoesNotMatch", Message: fmt.Sprintf("Credential should be scoped to a valid region and service sns, not %s/%s", a.Region, a.Service)}
	case a.AccessKeyID != AccessKeyID:
		return a, &Failure{Status: 403, Code: "InvalidClientTokenId", Message: "The security token included in the request is invalid."}
	case !strings.HasPrefix(amzDate, a.Date) || len(amzDate) != 16:
		return a, &Failure{Status: 400, Code: "IncompleteSignature", Message: "X-Amz-Date must be set and match the credential date"}
	case !slices.Contains(a.SignedHeaders, "host") || !slices.Contains(a.SignedHeaders, "x-amz-date"):
		return a, &Failure{Status: 400, Code: "IncompleteSignature", Message: "SignedHeaders must include host and x-amz-date"}
	}
	var canon strings.Builder
	canon.WriteString(r.Method + "\n" + canonicalPath(r.URL.EscapedPath()) + "\n" + canonicalQuery(r.URL.Query()) + "\n")
	for _, name := range a.SignedHeaders {
		var vals []string
		switch name {
		case "host":
			vals = []string{r.Host}
		case "content-length":
			vals = []string{strconv.FormatInt(r.ContentLength, 10)}
		default:
			vals = r.Header.Values(name)
		}
		for i, v := range vals {
			vals[i] = strings.Join(strings.Fields(v), " ")
		}
		canon.WriteString(name + ":" + strings.Join(vals, ",") + "\n")
	}
	payloadHash := r.Header.Get("X-Amz-Content-Sha256")
	if payloadHash == "" {
		sum := sha256.Sum256(body)
		payloadHash = hex.EncodeToString(sum[:])
	}
	canon.WriteString("\n" + strings.Join(a.SignedHeaders, ";") + "\n" + payloadHash)
	scope := a.Date + "/" + a.Region + "/" + a.Service + "/aws4_request"
	crHash := sha256.Sum256([]byte(canon.String()))
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(crHash[:])
	key := []byte("AWS4" + SecretAccessKey)
	for _, part := range []string{a.Date, a.Region, a.Service, "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	if want := hex.EncodeToString(hmacSHA256(key, toSign)); !hmac.Equal([]byte(want), []byte(a.Signature)) {
		return a, &Failure{Status: 403, Code: "SignatureDoesNotMatch", Message: "The request signature we calculated does not match the signature you provided."}
	}
	return a, nil
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func canonicalPath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// canonicalQuery is SigV4's canonical query string: names and values URI-encoded, sorted.
func canonicalQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, awsEscape(k)+"="+awsEscape(v))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}

func awsEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
