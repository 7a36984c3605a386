package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/google/uuid"

	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/internal/testkit/snstest"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
	"github.com/flagdown/flagdown/shared/push"
)

var (
	appFCM     = snstest.AppARN("GCM", "flagdown-android")
	appAPNS    = snstest.AppARN("APNS", "flagdown-ios")
	appSandbox = snstest.AppARN("APNS_SANDBOX", "flagdown-ios-dev")
)

// fcmToken is shaped like an FCM registration token: <instance id>:<base64url>.
const fcmToken = "dGVzdC1pbnN0YW5jZQ:APA91bH-k3y_T0k3n0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP"

// apnsToken is a 32-byte APNs device token in hex.
const apnsToken = "5f1a3c9e0b7d42a8c6e1f03b9d2a4c7e8f0b1d3a5c7e9f1b3d5a7c9e1f3b5d7a"

type fixture struct {
	push *push.SNS
	sns  *snstest.Server
	db   *pgstore.DB
}

// newFixture builds the push fallback from a configuration naming the three applications of a
// fresh SNS stand-in (env adds or overrides variables), over a fresh schema.
func newFixture(t *testing.T, env map[string]string) fixture {
	t.Helper()
	srv := snstest.New(t)
	vars := map[string]string{
		"FLAGDOWN_SNS_APP_ARN_FCM":          appFCM,
		"FLAGDOWN_SNS_APP_ARN_APNS":         appAPNS,
		"FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX": appSandbox,
		"FLAGDOWN_SNS_ENDPOINT":             srv.URL,
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.FromEnv(vars)
	if err != nil {
		t.Fatal(err)
	}
	db := testkit.DB(t)
	p, err := push.NewSNS(context.Background(), cfg, db, snstest.ConfigOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{push: p, sns: srv, db: db}
}

func (f fixture) register(t *testing.T, role auth.Role, user string, p push.Platform, token string) pgstore.Device {
	t.Helper()
	d, err := f.push.RegisterDevice(context.Background(), role, user, p, token)
	if err != nil {
		t.Fatalf("RegisterDevice(%s, %s, %s): %v", role, user, p, err)
	}
	return d
}

func (f fixture) devices(t *testing.T, role auth.Role, user string) []pgstore.Device {
	t.Helper()
	ds, err := pgstore.UserDevices(context.Background(), f.db.Pool, string(role), user)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func (f fixture) countDevices(t *testing.T) int {
	t.Helper()
	var n int
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM devices`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func actions(reqs []snstest.Request) []string {
	out := []string{}
	for _, r := range reqs {
		out = append(out, r.Action)
	}
	return out
}

func TestRegisterDeviceCreatesEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)

	reqs := f.sns.Requests()
	if got, want := actions(reqs), []string{"CreatePlatformEndpoint", "GetEndpointAttributes"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SNS calls = %v, want %v", got, want)
	}
	wantForm := url.Values{
		"Action":                 {"CreatePlatformEndpoint"},
		"Version":                {"2010-03-31"},
		"PlatformApplicationArn": {appFCM},
		"Token":                  {fcmToken},
		"CustomUserData":         {"driver:d-7"},
	}
	if got := reqs[0].Form; !reflect.DeepEqual(got, wantForm) {
		t.Errorf("CreatePlatformEndpoint form = %v, want %v", got, wantForm)
	}
	if a := reqs[0].Auth; a.Service != "sns" || a.Region != snstest.Region || a.AccessKeyID != snstest.AccessKeyID {
		t.Errorf("signed for %s/%s by %s, want sns/%s by %s", a.Service, a.Region, a.AccessKeyID, snstest.Region, snstest.AccessKeyID)
	}

	eps := f.sns.Endpoints()
	if len(eps) != 1 {
		t.Fatalf("SNS holds %d endpoints, want 1", len(eps))
	}
	ep := eps[0]
	if got, want := ep.Attributes, map[string]string{"Enabled": "true", "Token": fcmToken, "CustomUserData": "driver:d-7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("endpoint attributes = %v, want %v", got, want)
	}
	if got, want := reqs[1].Form, (url.Values{"Action": {"GetEndpointAttributes"}, "Version": {"2010-03-31"}, "EndpointArn": {ep.ARN}}); !reflect.DeepEqual(got, want) {
		t.Errorf("GetEndpointAttributes form = %v, want %v", got, want)
	}
	if d.EndpointARN != ep.ARN || d.Role != "driver" || d.UserID != "d-7" || d.Platform != "fcm" || d.Token != fcmToken || !d.Enabled {
		t.Errorf("device = %+v, want driver d-7 fcm enabled on %s", d, ep.ARN)
	}
	if got := f.devices(t, auth.RoleDriver, "d-7"); len(got) != 1 || !reflect.DeepEqual(got[0], d) {
		t.Errorf("stored devices = %+v, want [%+v]", got, d)
	}
}

// TestRegisterDeviceAgain: SNS's CreatePlatformEndpoint is idempotent for the same token and
// attributes; a second registration names the same endpoint and changes nothing.
func TestRegisterDeviceAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	first := f.register(t, auth.RoleRider, "r-1", push.PlatformAPNS, strings.ToUpper(apnsToken))
	if first.Token != apnsToken {
		t.Errorf("stored APNs token %q, want it in lower case %q", first.Token, apnsToken)
	}
	second := f.register(t, auth.RoleRider, "r-1", push.PlatformAPNS, apnsToken)
	if second.EndpointARN != first.EndpointARN || !second.CreatedAt.Equal(first.CreatedAt) {
		t.Errorf("second registration %+v, want the first's endpoint and created_at (%+v)", second, first)
	}
	if got, want := actions(f.sns.Requests()), []string{"CreatePlatformEndpoint", "GetEndpointAttributes", "CreatePlatformEndpoint", "GetEndpointAttributes"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SNS calls = %v, want %v", got, want)
	}
	if n := len(f.sns.Endpoints()); n != 1 {
		t.Errorf("SNS holds %d endpoints, want 1", n)
	}
	if n := f.countDevices(t); n != 1 {
		t.Errorf("%d device rows, want 1", n)
	}
}

// TestRegisterDeviceOtherUserReusesEndpoint: the same phone registered by another driver meets
// SNS's "already exists with the same Token, but different attributes"; the existing endpoint is
// reused, re-enabled and re-labelled, and the previous owner loses the device.
func TestRegisterDeviceOtherUserReusesEndpoint(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	first := f.register(t, auth.RoleDriver, "d-1", push.PlatformFCM, fcmToken)
	before := len(f.sns.Requests())
	second := f.register(t, auth.RoleDriver, "d-2", push.PlatformFCM, fcmToken)

	reqs := f.sns.Requests()[before:]
	if got, want := actions(reqs), []string{"CreatePlatformEndpoint", "SetEndpointAttributes"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("SNS calls = %v, want %v", got, want)
	}
	if got, want := reqs[0].Params["CustomUserData"], "driver:d-2"; got != want {
		t.Errorf("CustomUserData = %q, want %q", got, want)
	}
	wantSet := url.Values{
		"Action":                   {"SetEndpointAttributes"},
		"Version":                  {"2010-03-31"},
		"EndpointArn":              {first.EndpointARN},
		"Attributes.entry.1.key":   {"CustomUserData"},
		"Attributes.entry.1.value": {"driver:d-2"},
		"Attributes.entry.2.key":   {"Enabled"},
		"Attributes.entry.2.value": {"true"},
		"Attributes.entry.3.key":   {"Token"},
		"Attributes.entry.3.value": {fcmToken},
	}
	if got := reqs[1].Form; !reflect.DeepEqual(got, wantSet) {
		t.Errorf("SetEndpointAttributes form = %v, want %v", got, wantSet)
	}
	if second.EndpointARN != first.EndpointARN {
		t.Errorf("second owner's endpoint %s, want the existing %s", second.EndpointARN, first.EndpointARN)
	}
	if eps := f.sns.Endpoints(); len(eps) != 1 || eps[0].Attributes["CustomUserData"] != "driver:d-2" {
		t.Errorf("SNS endpoints = %+v, want one, labelled driver:d-2", eps)
	}
	if got := f.devices(t, auth.RoleDriver, "d-1"); len(got) != 0 {
		t.Errorf("previous owner still has devices %+v", got)
	}
	if got := f.devices(t, auth.RoleDriver, "d-2"); len(got) != 1 || got[0].EndpointARN != first.EndpointARN || !got[0].Enabled {
		t.Errorf("new owner's devices = %+v, want the endpoint %s, enabled", got, first.EndpointARN)
	}
}

// TestRegisterDeviceReenablesDisabledEndpoint: an endpoint SNS disabled (the push service refused
// the token) is returned as it is by CreatePlatformEndpoint; registration enables it again, in SNS
// and in the devices table.
func TestRegisterDeviceReenablesDisabledEndpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-3", push.PlatformFCM, fcmToken)
	f.sns.SetEndpointEnabled(d.EndpointARN, false)
	if _, err := f.push.Publish(ctx, d.EndpointARN, []byte(`{"type":"offer"}`), 15*time.Second); !errors.Is(err, push.ErrEndpointDisabled) {
		t.Fatalf("Publish to the disabled endpoint: %v, want ErrEndpointDisabled", err)
	}
	if got := f.devices(t, auth.RoleDriver, "d-3"); len(got) != 1 || got[0].Enabled {
		t.Fatalf("devices after EndpointDisabled = %+v, want one, disabled", got)
	}
	before := len(f.sns.Requests())
	again := f.register(t, auth.RoleDriver, "d-3", push.PlatformFCM, fcmToken)
	if got, want := actions(f.sns.Requests()[before:]), []string{"CreatePlatformEndpoint", "GetEndpointAttributes", "SetEndpointAttributes"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SNS calls = %v, want %v", got, want)
	}
	if ep, _ := f.sns.Endpoint(d.EndpointARN); ep.Attributes["Enabled"] != "true" {
		t.Errorf("SNS endpoint Enabled = %q, want true", ep.Attributes["Enabled"])
	}
	if again.EndpointARN != d.EndpointARN || !again.Enabled {
		t.Errorf("re-registered device %+v, want %s enabled", again, d.EndpointARN)
	}
	if _, err := f.push.Publish(ctx, d.EndpointARN, []byte(`{"type":"offer"}`), 15*time.Second); err != nil {
		t.Errorf("Publish after re-registration: %v", err)
	}
}

func TestRegisterDeviceRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	for name, tc := range map[string]struct {
		role     auth.Role
		user     string
		platform push.Platform
		token    string
		field    string
	}{
		"UnknownPlatform":     {auth.RoleDriver, "d-1", "android", fcmToken, "platform"},
		"EmptyPlatform":       {auth.RoleDriver, "d-1", "", fcmToken, "platform"},
		"UpperCasePlatform":   {auth.RoleDriver, "d-1", "FCM", fcmToken, "platform"},
		"EmptyToken":          {auth.RoleDriver, "d-1", push.PlatformFCM, "", "token"},
		"FCMTokenWithSpace":   {auth.RoleDriver, "d-1", push.PlatformFCM, "abc def", "token"},
		"FCMTokenWithNewline": {auth.RoleDriver, "d-1", push.PlatformFCM, "abc\ndef", "token"},
		"FCMTokenNonASCII":    {auth.RoleDriver, "d-1", push.PlatformFCM, "abcé", "token"},
		"FCMTokenTooLong":     {auth.RoleDriver, "d-1", push.PlatformFCM, strings.Repeat("a", push.MaxFCMTokenBytes+1), "token"},
		"APNSTokenNotHex":     {auth.RoleDriver, "d-1", push.PlatformAPNS, "zz" + apnsToken[2:], "token"},
		"APNSTokenTooLong":    {auth.RoleDriver, "d-1", push.PlatformAPNSSandbox, strings.Repeat("ab", 201), "token"},
		"OpsHasNoDevices":     {auth.RoleOps, "o-1", push.PlatformFCM, fcmToken, "role"},
		"UnknownRole":         {"admin", "o-1", push.PlatformFCM, fcmToken, "role"},
		"UserIDWithSpace":     {auth.RoleRider, "r 1", push.PlatformFCM, fcmToken, "user_id"},
		"EmptyUserID":         {auth.RoleRider, "", push.PlatformFCM, fcmToken, "user_id"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.push.RegisterDevice(context.Background(), tc.role, tc.user, tc.platform, tc.token)
			e := dispatch.AsError(err)
			if err == nil || e.Code != dispatch.CodeInvalidArgument || e.Field != tc.field || !strings.HasPrefix(e.Message, tc.field+": ") {
				t.Fatalf("err = %v, want invalid_argument on %s", err, tc.field)
			}
		})
	}
	// The longest tokens SNS takes pass.
	f.register(t, auth.RoleDriver, "d-max", push.PlatformFCM, strings.Repeat("a", push.MaxFCMTokenBytes))
	f.register(t, auth.RoleDriver, "d-max", push.PlatformAPNSSandbox, strings.Repeat("ab", push.MaxAPNSTokenChars/2))
	if n := len(f.sns.RequestsOf("CreatePlatformEndpoint")); n != 2 {
		t.Errorf("%d CreatePlatformEndpoint calls, want only the 2 of the valid registrations", n)
	}
	if n := f.countDevices(t); n != 2 {
		t.Errorf("%d device rows, want only the 2 valid ones", n)
	}
}

// TestRegisterDeviceUnconfiguredPlatform: a platform without an application ARN is refused before
// any SNS call.
func TestRegisterDeviceUnconfiguredPlatform(t *testing.T) {
	t.Parallel()
	f := newFixture(t, map[string]string{"FLAGDOWN_SNS_APP_ARN_APNS_SANDBOX": ""})
	_, err := f.push.RegisterDevice(context.Background(), auth.RoleDriver, "d-1", push.PlatformAPNSSandbox, apnsToken)
	if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeInvalidArgument || e.Field != "platform" {
		t.Fatalf("err = %v, want invalid_argument on platform", err)
	}
	if n := len(f.sns.Requests()); n != 0 || f.countDevices(t) != 0 {
		t.Errorf("%d SNS calls and %d rows, want none", n, f.countDevices(t))
	}
}

// offerMsg is a message as the WebSocket carries it, with insignificant whitespace.
const offerMsg = `{"id": "m-1", "type": "offer", "at": "2026-12-01T12:00:00Z",
	"data": {"ride_id": "5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11", "expires_at": "2026-12-01T12:00:15Z"}}`

const offerCompact = `{"id":"m-1","type":"offer","at":"2026-12-01T12:00:00Z","data":{"ride_id":"5b0b9c5e-8a51-4f7b-9d7e-0d2f3c7c1a11","expires_at":"2026-12-01T12:00:15Z"}}`

// jsonEqual compares two JSON texts as values.
func jsonEqual(t *testing.T, what, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Errorf("%s is not JSON: %v: %s", what, err, got)
		return
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("want of %s is not JSON: %v", what, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s =\n%s\nwant\n%s", what, got, want)
	}
}

func TestPublishRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)
	before := len(f.sns.Requests())

	id, err := f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), 14*time.Second+700*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uuid.Parse(id); err != nil {
		t.Errorf("message id %q is not SNS's: %v", id, err)
	}
	reqs := f.sns.Requests()[before:]
	if len(reqs) != 1 || reqs[0].Action != "Publish" {
		t.Fatalf("SNS calls = %v, want [Publish]", actions(reqs))
	}
	r := reqs[0]
	if r.Form.Get("Version") != "2010-03-31" || r.Params["TargetArn"] != d.EndpointARN || r.Params["MessageStructure"] != "json" {
		t.Errorf("Publish Version %q TargetArn %q MessageStructure %q, want 2010-03-31, %s, json",
			r.Form.Get("Version"), r.Params["TargetArn"], r.Params["MessageStructure"], d.EndpointARN)
	}
	if got, want := len(r.Params), 3; got != want { // TargetArn, MessageStructure, Message: no Subject, TopicArn, ...
		t.Errorf("Publish params = %v, want only TargetArn, MessageStructure and Message", r.Params)
	}
	var message map[string]string
	if err := json.Unmarshal([]byte(r.Params["Message"]), &message); err != nil {
		t.Fatalf("Message is not a JSON object of strings: %v: %s", err, r.Params["Message"])
	}
	if len(message) != 4 {
		t.Errorf("Message keys = %v, want default, GCM, APNS, APNS_SANDBOX", message)
	}
	if message["default"] != offerCompact {
		t.Errorf("default = %s, want %s", message["default"], offerCompact)
	}
	jsonEqual(t, "GCM", message["GCM"], `{"fcmV1Message":{"message":{
		"data":{"flagdown":`+strconvQuote(offerCompact)+`},
		"android":{"priority":"high","ttl":"14s"}}}}`)
	wantAPNS := `{"aps":{"alert":{"loc-key":"flagdown.offer"},"sound":"default"},"flagdown":` + offerCompact + `}`
	jsonEqual(t, "APNS", message["APNS"], wantAPNS)
	jsonEqual(t, "APNS_SANDBOX", message["APNS_SANDBOX"], wantAPNS)

	str := func(v string) snstest.MessageAttribute {
		return snstest.MessageAttribute{DataType: "String", StringValue: v}
	}
	wantAttrs := map[string]snstest.MessageAttribute{
		"AWS.SNS.MOBILE.FCM.TTL":          str("14"),
		"AWS.SNS.MOBILE.APNS.TTL":         str("14"),
		"AWS.SNS.MOBILE.APNS_SANDBOX.TTL": str("14"),
		"AWS.SNS.MOBILE.APNS.PRIORITY":    str("10"),
		"AWS.SNS.MOBILE.APNS.PUSH_TYPE":   str("alert"),
		"AWS.SNS.MOBILE.APNS.COLLAPSE_ID": str("m-1"),
	}
	if !reflect.DeepEqual(r.MessageAttributes, wantAttrs) {
		t.Errorf("MessageAttributes = %v, want %v", r.MessageAttributes, wantAttrs)
	}
	// The raw form carries them as SNS's Query protocol spells them.
	for k := range r.Form {
		if strings.HasPrefix(k, "MessageAttributes.entry.") && !strings.HasSuffix(k, ".Name") &&
			!strings.HasSuffix(k, ".Value.DataType") && !strings.HasSuffix(k, ".Value.StringValue") {
			t.Errorf("unexpected form field %s", k)
		}
	}
	ep, _ := f.sns.Endpoint(d.EndpointARN)
	if len(ep.Delivered) != 1 || ep.Delivered[0] != message["GCM"] {
		t.Errorf("delivered to the FCM endpoint: %v, want the GCM payload", ep.Delivered)
	}
}

// strconvQuote quotes s as a JSON string.
func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestPublishPerPlatform: each endpoint gets its platform's payload.
func TestPublishPerPlatform(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	ios := f.register(t, auth.RoleDriver, "d-1", push.PlatformAPNSSandbox, apnsToken)
	if _, err := f.push.Publish(ctx, ios.EndpointARN, []byte(`{"id":"m-2","type":"ride_cancelled"}`), 0); err != nil {
		t.Fatal(err)
	}
	ep, _ := f.sns.Endpoint(ios.EndpointARN)
	if len(ep.Delivered) != 1 {
		t.Fatalf("delivered %v, want one payload", ep.Delivered)
	}
	jsonEqual(t, "APNS_SANDBOX payload", ep.Delivered[0],
		`{"aps":{"alert":{"loc-key":"flagdown.ride_cancelled"},"sound":"default"},"flagdown":{"id":"m-2","type":"ride_cancelled"}}`)
	if got := f.sns.RequestsOf("Publish")[0].MessageAttributes["AWS.SNS.MOBILE.APNS_SANDBOX.TTL"].StringValue; got != "0" {
		t.Errorf("TTL of a push with no time left = %q, want 0 (now or never)", got)
	}
	// A type that is no lower-case name gets the generic alert.
	if _, err := f.push.Publish(ctx, ios.EndpointARN, []byte(`{"type":"Bad Type"}`), time.Minute); err != nil {
		t.Fatal(err)
	}
	ep, _ = f.sns.Endpoint(ios.EndpointARN)
	jsonEqual(t, "generic payload", ep.Delivered[1], `{"aps":{"alert":{"loc-key":"flagdown.message"},"sound":"default"},"flagdown":{"type":"Bad Type"}}`)

	// Only an id APNs takes as apns-collapse-id (1..64 bytes of printable ASCII) becomes one.
	for msg, want := range map[string]string{
		`{"id":"m-2","type":"ride.status"}`:                             "m-2",
		`{"type":"ride.status"}`:                                        "",
		`{"id":"` + strings.Repeat("x", 65) + `","type":"ride.status"}`: "",
		`{"id":"has space","type":"ride.status"}`:                       "",
		`{"id":7,"type":"ride.status"}`:                                 "",
	} {
		if _, err := f.push.Publish(ctx, ios.EndpointARN, []byte(msg), time.Minute); err != nil {
			t.Fatal(err)
		}
		pubs := f.sns.RequestsOf("Publish")
		got, ok := pubs[len(pubs)-1].MessageAttributes["AWS.SNS.MOBILE.APNS.COLLAPSE_ID"]
		if got.StringValue != want || ok != (want != "") {
			t.Errorf("%s: collapse id %q (present %v), want %q", msg, got.StringValue, ok, want)
		}
	}
}

func TestPublishEndpointDisabled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)
	f.sns.SetEndpointEnabled(d.EndpointARN, false)

	_, err := f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), 15*time.Second)
	var ee *push.EndpointError
	if !errors.As(err, &ee) || !errors.Is(err, push.ErrEndpointDisabled) || ee.EndpointARN != d.EndpointARN {
		t.Fatalf("err = %v, want an *EndpointError for %s wrapping ErrEndpointDisabled", err, d.EndpointARN)
	}
	var sdkErr *types.EndpointDisabledException
	if !errors.As(err, &sdkErr) {
		t.Errorf("err = %v, want SNS's EndpointDisabledException as its cause", err)
	}
	got := f.devices(t, auth.RoleDriver, "d-7")
	if len(got) != 1 || got[0].Enabled || !got[0].UpdatedAt.After(d.UpdatedAt) {
		t.Errorf("devices = %+v, want the one device disabled (updated after %v)", got, d.UpdatedAt)
	}
	// The disabled device gets nothing more.
	before := len(f.sns.Requests())
	sent, err := f.push.PublishToUser(ctx, auth.RoleDriver, "d-7", []byte(offerMsg), 15*time.Second)
	if sent != 0 || err != nil {
		t.Errorf("PublishToUser = %d, %v; want 0, nil", sent, err)
	}
	if n := len(f.sns.Requests()) - before; n != 0 {
		t.Errorf("%d SNS calls for a user whose only device is disabled, want 0", n)
	}
}

// TestPublishInjectedErrors: errors the stand-in is told to answer for an endpoint.
func TestPublishInjectedErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)

	f.sns.FailEndpoint(d.EndpointARN, "EndpointDisabled", "")
	if _, err := f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), time.Second); !errors.Is(err, push.ErrEndpointDisabled) {
		t.Errorf("EndpointDisabled: err = %v, want ErrEndpointDisabled", err)
	}
	f.sns.ClearFailure(d.EndpointARN)
	f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken) // enabled again

	f.sns.FailEndpoint(d.EndpointARN, "Throttled", "")
	_, err := f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), time.Second)
	if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeUnavailable {
		t.Errorf("Throttled: err = %v, want unavailable", err)
	}
	f.sns.FailEndpoint(d.EndpointARN, "AuthorizationError", "User is not authorized to perform: SNS:Publish")
	_, err = f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), time.Second)
	if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeInternal {
		t.Errorf("AuthorizationError: err = %v, want internal", err)
	}
	if got := f.devices(t, auth.RoleDriver, "d-7"); len(got) != 1 || !got[0].Enabled {
		t.Errorf("devices = %+v, want the device still enabled: throttling and permissions say nothing about it", got)
	}
	f.sns.FailEndpoint(d.EndpointARN, "NotFound", "")
	if _, err := f.push.Publish(ctx, d.EndpointARN, []byte(offerMsg), time.Second); !errors.Is(err, push.ErrEndpointNotFound) {
		t.Errorf("NotFound: err = %v, want ErrEndpointNotFound", err)
	}
	if got := f.devices(t, auth.RoleDriver, "d-7"); len(got) != 0 {
		t.Errorf("devices after NotFound = %+v, want none", got)
	}
}

// TestPublishEndpointDeleted: an endpoint deleted in SNS answers NotFound; the row goes.
func TestPublishEndpointDeleted(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleRider, "r-9", push.PlatformAPNS, apnsToken)
	f.sns.RemoveEndpoint(d.EndpointARN)
	_, err := f.push.Publish(context.Background(), d.EndpointARN, []byte(offerMsg), time.Second)
	var ee *push.EndpointError
	if !errors.As(err, &ee) || !errors.Is(err, push.ErrEndpointNotFound) || ee.EndpointARN != d.EndpointARN {
		t.Fatalf("err = %v, want an *EndpointError wrapping ErrEndpointNotFound", err)
	}
	if n := f.countDevices(t); n != 0 {
		t.Errorf("%d device rows, want 0", n)
	}
}

func TestPublishToUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	android := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)
	iphone := f.register(t, auth.RoleDriver, "d-7", push.PlatformAPNS, apnsToken)
	other := f.register(t, auth.RoleDriver, "d-8", push.PlatformFCM, fcmToken+"x")
	f.sns.SetEndpointEnabled(iphone.EndpointARN, false)

	sent, err := f.push.PublishToUser(ctx, auth.RoleDriver, "d-7", []byte(offerMsg), 15*time.Second)
	if sent != 1 || err != nil {
		t.Fatalf("PublishToUser = %d, %v; want 1, nil", sent, err)
	}
	targets := map[string]bool{}
	for _, r := range f.sns.RequestsOf("Publish") {
		targets[r.Params["TargetArn"]] = true
	}
	if want := map[string]bool{android.EndpointARN: true, iphone.EndpointARN: true}; !reflect.DeepEqual(targets, want) {
		t.Errorf("published to %v, want both of d-7's endpoints %v", targets, want)
	}
	if ep, _ := f.sns.Endpoint(other.EndpointARN); len(ep.Delivered) != 0 {
		t.Errorf("another driver's device got %v", ep.Delivered)
	}
	enabled, err := pgstore.EnabledDevices(ctx, f.db.Pool, "driver", "d-7")
	if err != nil || len(enabled) != 1 || enabled[0].EndpointARN != android.EndpointARN {
		t.Errorf("enabled devices = %+v, %v; want only the Android one", enabled, err)
	}
	if sent, err := f.push.PublishToUser(ctx, auth.RoleRider, "r-nobody", []byte(offerMsg), time.Second); sent != 0 || err != nil {
		t.Errorf("PublishToUser of a user without devices = %d, %v; want 0, nil", sent, err)
	}
}

func TestPublishRejectsBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleDriver, "d-7", push.PlatformFCM, fcmToken)
	before := len(f.sns.Requests())
	big := `{"data":"` + strings.Repeat("x", push.MaxPushPayloadBytes) + `"}`
	for name, tc := range map[string]struct {
		arn   string
		msg   string
		ttl   time.Duration
		field string
	}{
		"NotAnARN":     {"d-7", offerMsg, time.Second, "endpoint_arn"},
		"AppARN":       {appFCM, offerMsg, time.Second, "endpoint_arn"},
		"NotJSON":      {d.EndpointARN, `{"type":`, time.Second, "msg"},
		"JSONArray":    {d.EndpointARN, `[1,2]`, time.Second, "msg"},
		"JSONString":   {d.EndpointARN, `"offer"`, time.Second, "msg"},
		"Empty":        {d.EndpointARN, ``, time.Second, "msg"},
		"TooLarge":     {d.EndpointARN, big, time.Second, "msg"},
		"NegativeTTL":  {d.EndpointARN, offerMsg, -time.Second, "ttl"},
		"TTLOver28Day": {d.EndpointARN, offerMsg, push.MaxPushTTL + time.Second, "ttl"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := f.push.Publish(ctx, tc.arn, []byte(tc.msg), tc.ttl)
			if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeInvalidArgument || e.Field != tc.field {
				t.Errorf("Publish: err = %v, want invalid_argument on %s", err, tc.field)
			}
			if tc.field != "endpoint_arn" {
				_, err := f.push.PublishToUser(ctx, auth.RoleDriver, "d-7", []byte(tc.msg), tc.ttl)
				if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeInvalidArgument || e.Field != tc.field {
					t.Errorf("PublishToUser: err = %v, want invalid_argument on %s", err, tc.field)
				}
			}
		})
	}
	if n := len(f.sns.Requests()) - before; n != 0 {
		t.Errorf("%d SNS calls for invalid publishes, want 0", n)
	}
	if _, err := f.push.Publish(ctx, d.EndpointARN, []byte(`{"data":"`+strings.Repeat("x", 3500)+`"}`), push.MaxPushTTL); err != nil {
		t.Errorf("a 3.5 KB message with the longest TTL: %v", err)
	}
}

func TestUnregisterDevice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	d := f.register(t, auth.RoleRider, "r-1", push.PlatformAPNS, apnsToken)
	ok, err := f.push.UnregisterDevice(ctx, auth.RoleRider, "r-1", strings.ToUpper(apnsToken))
	if !ok || err != nil {
		t.Fatalf("UnregisterDevice = %v, %v; want true, nil", ok, err)
	}
	dels := f.sns.RequestsOf("DeleteEndpoint")
	if len(dels) != 1 || dels[0].Params["EndpointArn"] != d.EndpointARN {
		t.Errorf("DeleteEndpoint calls %v, want one for %s", dels, d.EndpointARN)
	}
	if _, exists := f.sns.Endpoint(d.EndpointARN); exists || f.countDevices(t) != 0 {
		t.Errorf("endpoint still in SNS (%v) or %d rows left", exists, f.countDevices(t))
	}
	if ok, err := f.push.UnregisterDevice(ctx, auth.RoleRider, "r-1", apnsToken); ok || err != nil {
		t.Errorf("second UnregisterDevice = %v, %v; want false, nil", ok, err)
	}
}

// TestOffWithoutApplications: no platform application configured turns the fallback off.
func TestOffWithoutApplications(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := push.NewSNS(ctx, cfg, testkit.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Enabled() {
		t.Error("Enabled() = true without any application ARN")
	}
	if (*push.SNS)(nil).Enabled() {
		t.Error("a nil *SNS is enabled")
	}
	if sent, err := p.PublishToUser(ctx, auth.RoleDriver, "d-1", []byte(offerMsg), time.Second); sent != 0 || err != nil {
		t.Errorf("PublishToUser = %d, %v; want 0, nil", sent, err)
	}
	_, err = p.RegisterDevice(ctx, auth.RoleDriver, "d-1", push.PlatformFCM, fcmToken)
	if e := dispatch.AsError(err); err == nil || e.Code != dispatch.CodeInvalidArgument || e.Field != "platform" {
		t.Errorf("RegisterDevice: err = %v, want invalid_argument on platform", err)
	}
	f := newFixture(t, nil)
	if !f.push.Enabled() {
		t.Error("Enabled() = false with three application ARNs")
	}
}
