package push

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/dispatch"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// Platform is the push service a device is registered with.
type Platform string

// Platforms, as devices register them (the devices table's platform column).
const (
	// PlatformFCM is Firebase Cloud Messaging (Android); its SNS application platform is GCM.
	PlatformFCM Platform = "fcm"
	// PlatformAPNS is Apple's production push service (App Store and TestFlight builds).
	PlatformAPNS Platform = "apns"
	// PlatformAPNSSandbox is Apple's sandbox push service (development builds).
	PlatformAPNSSandbox Platform = "apns_sandbox"
)

// platforms are the valid Platforms.
var platforms = map[Platform]bool{PlatformFCM: true, PlatformAPNS: true, PlatformAPNSSandbox: true}

// Limits of the push fallback.
const (
	// MaxFCMTokenBytes is the longest FCM registration token accepted, in bytes (SNS's limit for
	// any token: "must be at most 8192 bytes long in UTF-8 encoding").
	MaxFCMTokenBytes = 8192
	// MaxAPNSTokenChars is the longest APNs device token accepted, in hexadecimal characters (SNS's
	// limit: "iOS device tokens must be no more than 400 hexadecimal characters").
	MaxAPNSTokenChars = 400
	// MaxPushPayloadBytes is the largest push payload, in bytes: APNs refuses a payload (the aps
	// dictionary with the message) over 4096 bytes, and FCM a data message over 4096 bytes.
	MaxPushPayloadBytes = 4096
	// MaxPushTTL is the longest push time to live accepted: FCM's maximum, 28 days.
	MaxPushTTL = 28 * 24 * time.Hour
	// SNSCallTimeout bounds one HTTP attempt of an SNS call (the SDK's retries each get their own):
	// a push that takes longer is too late for an offer anyway.
	SNSCallTimeout = 10 * time.Second
)

// ErrEndpointDisabled is wrapped by an *EndpointError when SNS answered EndpointDisabled: the push
// service refused the device's token (app uninstalled, token rotated). The device row is disabled;
// the app registers again to be reachable.
var ErrEndpointDisabled = errors.New("push: the device's SNS endpoint is disabled")

// ErrEndpointNotFound is wrapped by an *EndpointError when the SNS endpoint no longer exists
// (deleted in SNS). The device row is deleted.
var ErrEndpointNotFound = errors.New("push: the device's SNS endpoint does not exist")

// EndpointError says a publish could not reach a device because its SNS endpoint is gone; the
// device row was updated accordingly. errors.Is(err, ErrEndpointDisabled) or ErrEndpointNotFound
// tells which; the caller tries the user's other devices or gives up on push.
type EndpointError struct {
	// EndpointARN is the endpoint published to.
	EndpointARN string
	// Err is ErrEndpointDisabled or ErrEndpointNotFound.
	Err error
	// Cause is SNS's answer (a *types.EndpointDisabledException, ...), and a failure to update the
	// device row, if any, joined to it.
	Cause error
}

// Error is the failure (Err), the endpoint ARN and the cause.
func (e *EndpointError) Error() string {
	return fmt.Sprintf("%v (%s): %v", e.Err, e.EndpointARN, e.Cause)
}

// Unwrap returns Err and Cause.
func (e *EndpointError) Unwrap() []error { return []error{e.Err, e.Cause} }

// SNS delivers messages to phones through Amazon SNS mobile push: it registers a device's token as
// an SNS platform endpoint (recorded in the devices table) and publishes to it. It is the fallback
// for a user without a live WebSocket. Build one per process with NewSNS; it is safe for
// concurrent use. Every method takes ctx to bound its SNS and PostgreSQL calls.
type SNS struct {
	client *sns.Client
	db     *pgstore.DB
	apps   map[Platform]string // platform application ARN of each configured platform
}

// SNS is the Pusher's mobile fallback.
var _ Mobile = (*SNS)(nil)

var (
	appARNRe      = regexp.MustCompile(`^arn:aws[a-z-]*:sns:([a-z0-9-]+):[0-9]{12}:app/[A-Z_]+/[A-Za-z0-9_.-]{1,256}$`)
	endpointARNRe = regexp.MustCompile(`^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:endpoint/[A-Z_]+/[A-Za-z0-9_.-]{1,256}/[A-Za-z0-9-]{1,64}$`)
	// existingARNRe finds the endpoint SNS names when CreatePlatformEndpoint meets a token that
	// already has an endpoint with other attributes: "Invalid parameter: Token Reason: Endpoint
	// <arn> already exists with the same Token, but different attributes."
	existingARNRe = regexp.MustCompile(`Endpoint (arn:aws[a-z-]*:sns:\S+) already exists with the same [Tt]oken`)
	hexRe         = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	pushTypeRe    = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,63}$`)
	// collapseIDRe is an id usable as apns-collapse-id (at most 64 bytes), printable ASCII.
	collapseIDRe = regexp.MustCompile(`^[!-~]{1,64}$`)
)

// NewSNS returns the push fallback of cfg over db. With none of cfg's SNS platform application
// ARNs (FLAGDOWN_SNS_APP_ARN_FCM, _APNS, _APNS_SANDBOX) set it is off (Enabled is false) and
// touches no AWS configuration. Otherwise it loads the AWS SDK's default configuration
// (credentials from the environment, shared files or the workload's role) with the region of the
// application ARNs and an HTTP client whose attempts time out after SNSCallTimeout, then optFns
// (tests pass their credentials), and sends SNS calls to cfg.SNSEndpoint when it is set. The
// SDK's default retryer retries transport failures and server errors; SNS's Throttled answer is not
// among the codes it retries, so a throttled call fails at once (unavailable). It returns an error
// for an application ARN that is not one or an AWS configuration that cannot be loaded.
func NewSNS(ctx context.Context, cfg *config.Config, db *pgstore.DB, optFns ...func(*awsconfig.LoadOptions) error) (*SNS, error) {
	s := &SNS{db: db, apps: map[Platform]string{}}
	region := ""
	for p, arn := range map[Platform]string{PlatformFCM: cfg.SNSAppARNFCM, PlatformAPNS: cfg.SNSAppARNAPNS, PlatformAPNSSandbox: cfg.SNSAppARNAPNSSandbox} {
		if arn == "" {
			continue
		}
		m := appARNRe.FindStringSubmatch(arn)
		if m == nil {
			return nil, fmt.Errorf("push: %s application ARN %q is not an SNS platform application ARN", p, arn)
		}
		s.apps[p], region = arn, m[1]
	}
	if len(s.apps) == 0 {
		return s, nil
	}
	defaults := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTimeout(SNSCallTimeout)),
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, append(defaults, optFns...)...)
	if err != nil {
		return nil, fmt.Errorf("push: load AWS configuration: %w", err)
	}
	s.client = sns.NewFromConfig(awsCfg, func(o *sns.Options) {
		if cfg.SNSEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.SNSEndpoint)
		}
	})
	return s, nil
}

// Enabled reports whether the push fallback is on: at least one platform application is
// configured. A nil *SNS is off.
func (s *SNS) Enabled() bool { return s != nil && len(s.apps) > 0 }

// validateOwner checks the role and user id of a device's owner.
func validateOwner(role auth.Role, userID string) error {
	if role != auth.RoleDriver && role != auth.RoleRider {
		return dispatch.Invalid("role", "must be driver or rider")
	}
	return dispatch.ValidateID("user_id", userID)
}

// validateToken checks a device token of platform p and returns it as stored: APNs tokens in
// lower case (SNS keeps them so). Errors name the field token.
func validateToken(p Platform, token string) (string, error) {
	if token == "" {
		return "", dispatch.Invalid("token", "is required")
	}
	if p == PlatformAPNS || p == PlatformAPNSSandbox {
		if len(token) > MaxAPNSTokenChars || !hexRe.MatchString(token) {
			return "", dispatch.Invalid("token", fmt.Sprintf("must be an APNs device token: 1..%d hexadecimal characters", MaxAPNSTokenChars))
		}
		return strings.ToLower(token), nil
	}
	if len(token) > MaxFCMTokenBytes {
		return "", dispatch.Invalid("token", fmt.Sprintf("must be at most %d bytes", MaxFCMTokenBytes))
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return "", dispatch.Invalid("token", fmt.Sprintf("must be printable ASCII without spaces (found byte 0x%02x at byte %d)", c, i))
		}
	}
	return token, nil
}

// customUserData is what flagdown stores on an SNS endpoint to name its owner, e.g. driver:d-7.
func customUserData(role auth.Role, userID string) string { return string(role) + ":" + userID }

// RegisterDevice registers the device token of role/userID on platform (fcm, apns, apns_sandbox)
// for push: it creates the SNS platform endpoint of the token in the platform's application
// (CreatePlatformEndpoint with CustomUserData "<role>:<userID>"), makes sure the endpoint is
// enabled, carries the token and names this owner (GetEndpointAttributes, then
// SetEndpointAttributes when it does not: an endpoint SNS disabled, or the same phone registered
// by another user, which SNS reports as InvalidParameter naming the existing endpoint, whose ARN
// is reused), and records the device (pgstore.UpsertDevice: the endpoint's previous owner loses
// it). Registering again is harmless. It returns the stored device.
//
// Errors are dispatch errors: invalid_argument on role, user_id, platform (not one of the three,
// or not configured on this server) or token (fcm: 1..MaxFCMTokenBytes bytes of printable ASCII
// without spaces; apns: 1..MaxAPNSTokenChars hexadecimal characters, stored in lower case) with
// nothing sent or written, or on token when SNS refuses it (nothing written); unavailable when SNS
// or PostgreSQL cannot be reached or SNS throttles; internal for an SNS refusal that is flagdown's
// fault (credentials, permissions, a missing application).
func (s *SNS) RegisterDevice(ctx context.Context, role auth.Role, userID string, platform Platform, token string) (pgstore.Device, error) {
	if err := validateOwner(role, userID); err != nil {
		return pgstore.Device{}, err
	}
	if !platforms[platform] {
		return pgstore.Device{}, dispatch.Invalid("platform", "must be fcm, apns or apns_sandbox")
	}
	token, err := validateToken(platform, token)
	if err != nil {
		return pgstore.Device{}, err
	}
	if !s.Enabled() {
		return pgstore.Device{}, dispatch.Invalid("platform", "push to phones is not configured on this server")
	}
	app, ok := s.apps[platform]
	if !ok {
		return pgstore.Device{}, dispatch.Invalid("platform", fmt.Sprintf("push to %s devices is not configured on this server", platform))
	}
	arn, err := s.ensureEndpoint(ctx, app, token, customUserData(role, userID))
	if err != nil {
		return pgstore.Device{}, err
	}
	d := pgstore.Device{Role: string(role), UserID: userID, Platform: string(platform), Token: token, EndpointARN: arn}
	err = s.db.Tx(ctx, func(tx pgx.Tx) error { return pgstore.UpsertDevice(ctx, tx, &d) })
	return d, err
}

// ensureEndpoint returns the ARN of token's endpoint in app, enabled, with token and cud, following
// SNS's recommended registration (create, then check and repair the attributes). An endpoint
// deleted between two of its calls is created again, once.
func (s *SNS) ensureEndpoint(ctx context.Context, app, token, cud string) (string, error) {
	for attempt := 0; ; attempt++ {
		arn, exists, err := s.createEndpoint(ctx, app, token, cud)
		if err != nil {
			return "", err
		}
		repair := exists
		if !exists {
			out, err := s.client.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
			if err != nil {
				if isNotFound(err) && attempt == 0 {
					continue
				}
				return "", snsError(err)
			}
			a := out.Attributes
			repair = a["Enabled"] != "true" || a["Token"] != token || a["CustomUserData"] != cud
		}
		if repair {
			_, err := s.client.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{
				EndpointArn: aws.String(arn),
				Attributes:  map[string]string{"Enabled": "true", "Token": token, "CustomUserData": cud},
			})
			if err != nil {
				if isNotFound(err) && attempt == 0 {
					continue
				}
				return "", snsError(err)
			}
		}
		return arn, nil
	}
}

// createEndpoint calls CreatePlatformEndpoint. exists reports SNS's "already exists with the same
// Token, but different attributes" answer, whose endpoint ARN it returns.
func (s *SNS) createEndpoint(ctx context.Context, app, token, cud string) (arn string, exists bool, err error) {
	out, err := s.client.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{
		PlatformApplicationArn: aws.String(app),
		Token:                  aws.String(token),
		CustomUserData:         aws.String(cud),
	})
	if err == nil {
		if out.EndpointArn == nil || *out.EndpointArn == "" {
			return "", false, dispatch.Internal(errors.New("push: CreatePlatformEndpoint answered no EndpointArn"))
		}
		return *out.EndpointArn, false, nil
	}
	var ip *types.InvalidParameterException
	if errors.As(err, &ip) {
		msg := ip.ErrorMessage()
		if m := existingARNRe.FindStringSubmatch(msg); m != nil {
			return m[1], true, nil
		}
		if strings.HasPrefix(msg, "Invalid parameter: Token") {
			return "", false, dispatch.Invalid("token", "was refused by SNS: "+msg)
		}
	}
	return "", false, snsError(err)
}

func isNotFound(err error) bool {
	var nf *types.NotFoundException
	return errors.As(err, &nf)
}

// snsError maps an SNS call's failure to a dispatch error: unavailable for transport failures,
// throttling and SNS's own faults (retry later), internal for a refusal that is flagdown's fault.
func snsError(err error) error {
	var api smithy.APIError
	if errors.As(err, &api) {
		if api.ErrorCode() == "Throttled" || api.ErrorFault() == smithy.FaultServer {
			return dispatch.Unavailable("sns", err)
		}
		return dispatch.Internal(err)
	}
	return dispatch.Unavailable("sns", err)
}

// publication is one message ready for Publish: SNS's JSON message and its message attributes.
type publication struct {
	message string
	attrs   map[string]types.MessageAttributeValue
}

// fcmPayload is the GCM key's value: an FCM HTTP v1 message (SNS's fcmV1Message form) with the
// message as one data field, delivered to the app even in the background (priority high).
type fcmPayload struct {
	FCMV1Message struct {
		Message struct {
			Data    map[string]string `json:"data"`
			Android struct {
				Priority string `json:"priority"`
				TTL      string `json:"ttl"`
			} `json:"android"`
		} `json:"message"`
	} `json:"fcmV1Message"`
}

// apnsPayload is the APNS and APNS_SANDBOX keys' value: an alert whose text the app localizes from
// loc-key, and the message under the custom key flagdown.
type apnsPayload struct {
	APS struct {
		Alert struct {
			LocKey string `json:"loc-key"`
		} `json:"alert"`
		Sound string `json:"sound"`
	} `json:"aps"`
	Flagdown json.RawMessage `json:"flagdown"`
}

// prepare validates msg and ttl and builds their publication. See Publish for the payloads.
func prepare(msg []byte, ttl time.Duration) (publication, error) {
	switch {
	case ttl < 0:
		return publication{}, dispatch.Invalid("ttl", "must not be negative")
	case ttl > MaxPushTTL:
		return publication{}, dispatch.Invalid("ttl", "must be at most 672h (28 days, FCM's longest)")
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, msg); err != nil || compact.Len() == 0 || compact.Bytes()[0] != '{' {
		return publication{}, dispatch.Invalid("msg", "must be a JSON object")
	}
	b := compact.Bytes()
	var env struct {
		ID   any `json:"id"`
		Type any `json:"type"`
	}
	_ = json.Unmarshal(b, &env)
	locKey := "flagdown.message"
	if t, ok := env.Type.(string); ok && pushTypeRe.MatchString(t) {
		locKey = "flagdown." + t
	}
	secs := strconv.FormatInt(int64(ttl/time.Second), 10)
	id, _ := env.ID.(string)

	var fcm fcmPayload
	fcm.FCMV1Message.Message.Data = map[string]string{"flagdown": compact.String()}
	fcm.FCMV1Message.Message.Android.Priority = "high"
	fcm.FCMV1Message.Message.Android.TTL = secs + "s"
	var apns apnsPayload
	apns.APS.Alert.LocKey = locKey
	apns.APS.Sound = "default"
	apns.Flagdown = b
	fcmJSON, err := json.Marshal(fcm)
	if err != nil {
		return publication{}, dispatch.Internal(err)
	}
	apnsJSON, err := json.Marshal(apns)
	if err != nil {
		return publication{}, dispatch.Internal(err)
	}
	if n := max(len(apnsJSON), len(b)); n > MaxPushPayloadBytes {
		return publication{}, dispatch.Invalid("msg", fmt.Sprintf("must fit a push payload of at most %d bytes (the APNs and FCM limit); this one needs %d", MaxPushPayloadBytes, n))
	}
	message, err := json.Marshal(map[string]string{
		"default":      compact.String(),
		"GCM":          string(fcmJSON),
		"APNS":         string(apnsJSON),
		"APNS_SANDBOX": string(apnsJSON),
	})
	if err != nil {
		return publication{}, dispatch.Internal(err)
	}
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs := map[string]types.MessageAttributeValue{
		"AWS.SNS.MOBILE.FCM.TTL":          str(secs),
		"AWS.SNS.MOBILE.APNS.TTL":         str(secs),
		"AWS.SNS.MOBILE.APNS_SANDBOX.TTL": str(secs),
		"AWS.SNS.MOBILE.APNS.PRIORITY":    str("10"),
		"AWS.SNS.MOBILE.APNS.PUSH_TYPE":   str("alert"),
	}
	if collapseIDRe.MatchString(id) {
		// The same message pushed twice (a redelivered event) replaces its alert instead of adding one.
		attrs["AWS.SNS.MOBILE.APNS.COLLAPSE_ID"] = str(id)
	}
	return publication{message: string(message), attrs: attrs}, nil
}

// Publish sends msg, a small JSON object (the message a WebSocket would carry, e.g.
// {"id":…,"type":…,"at":…,"data":…}), to one device's SNS endpoint, to be dropped by the push
// service if not delivered within ttl (whole seconds, rounded down; under 1s means now or never).
// It publishes with TargetArn and MessageStructure json a message with a payload per platform:
//
//   - default: msg itself (compacted);
//   - GCM: an FCM HTTP v1 data message, {"fcmV1Message":{"message":{"data":{"flagdown":"<msg>"},
//     "android":{"priority":"high","ttl":"<ttl>s"}}}}, the message as a string (FCM data values are
//     strings);
//   - APNS and APNS_SANDBOX: {"aps":{"alert":{"loc-key":"flagdown.<type>"},"sound":"default"},
//     "flagdown":<msg>}, a visible alert whose text the app localizes from loc-key (<type> is msg's
//     type when it is a lower-case name, else "message"), with msg as a JSON object;
//
// and the message attributes AWS.SNS.MOBILE.FCM.TTL, AWS.SNS.MOBILE.APNS.TTL and
// AWS.SNS.MOBILE.APNS_SANDBOX.TTL (ttl in seconds), AWS.SNS.MOBILE.APNS.PRIORITY 10 and
// AWS.SNS.MOBILE.APNS.PUSH_TYPE alert (every push is high priority: the fallback carries
// time-critical messages, offers), and AWS.SNS.MOBILE.APNS.COLLAPSE_ID msg's id when it is 1..64
// bytes of printable ASCII (a message pushed twice replaces its alert). It returns SNS's message id.
//
// Errors: an *EndpointError (ErrEndpointDisabled: the device row is disabled; ErrEndpointNotFound:
// it is deleted) when the endpoint is gone; dispatch errors otherwise: invalid_argument on
// endpoint_arn (not an SNS platform endpoint ARN), msg (not a JSON object, or a payload over
// MaxPushPayloadBytes) or ttl (negative or over MaxPushTTL) with nothing sent; unavailable when SNS
// cannot be reached or throttles; internal for a refusal that is flagdown's fault. Throttling is
// retried only as the SDK's default retryer does.
func (s *SNS) Publish(ctx context.Context, endpointARN string, msg []byte, ttl time.Duration) (string, error) {
	if !endpointARNRe.MatchString(endpointARN) {
		return "", dispatch.Invalid("endpoint_arn", "must be an SNS platform endpoint ARN arn:aws:sns:<region>:<account>:endpoint/<platform>/<application>/<id>")
	}
	p, err := prepare(msg, ttl)
	if err != nil {
		return "", err
	}
	if !s.Enabled() {
		return "", dispatch.Unavailable("sns", errors.New("push: no SNS platform application is configured"))
	}
	return s.publish(ctx, endpointARN, p)
}

func (s *SNS) publish(ctx context.Context, endpointARN string, p publication) (string, error) {
	out, err := s.client.Publish(ctx, &sns.PublishInput{
		TargetArn:         aws.String(endpointARN),
		MessageStructure:  aws.String("json"),
		Message:           aws.String(p.message),
		MessageAttributes: p.attrs,
	})
	if err == nil {
		return aws.ToString(out.MessageId), nil
	}
	var disabled *types.EndpointDisabledException
	var ip *types.InvalidParameterException
	switch {
	case errors.As(err, &disabled):
		_, dbErr := pgstore.DisableDevice(ctx, s.db.Pool, endpointARN)
		return "", &EndpointError{EndpointARN: endpointARN, Err: ErrEndpointDisabled, Cause: errors.Join(err, dbErr)}
	case isNotFound(err) ||
		// SNS has also answered a publish to a deleted endpoint this way.
		errors.As(err, &ip) && strings.Contains(ip.ErrorMessage(), "No endpoint found for the target arn specified"):
		_, dbErr := pgstore.DeleteDeviceByEndpoint(ctx, s.db.Pool, endpointARN)
		return "", &EndpointError{EndpointARN: endpointARN, Err: ErrEndpointNotFound, Cause: errors.Join(err, dbErr)}
	}
	return "", snsError(err)
}

// PublishToUser publishes msg with ttl (see Publish) to every enabled device of role/userID, most
// recently registered first, and returns how many SNS accepted. A device whose endpoint is gone is
// disabled or deleted (see Publish) and skipped without an error: sent 0 and a nil error mean the
// user has no reachable device. With the fallback off (Enabled false) it sends nothing.
//
// Errors are dispatch errors: invalid_argument on role, user_id, msg or ttl with nothing sent;
// unavailable or internal as Publish's, for the first device that failed so (the others are still
// tried, and sent counts those that got the message).
func (s *SNS) PublishToUser(ctx context.Context, role auth.Role, userID string, msg []byte, ttl time.Duration) (int, error) {
	if err := validateOwner(role, userID); err != nil {
		return 0, err
	}
	p, err := prepare(msg, ttl)
	if err != nil {
		return 0, err
	}
	if !s.Enabled() {
		return 0, nil
	}
	devices, err := pgstore.EnabledDevices(ctx, s.db.Pool, string(role), userID)
	if err != nil {
		return 0, err
	}
	sent := 0
	var first error
	for _, d := range devices {
		_, err := s.publish(ctx, d.EndpointARN, p)
		var gone *EndpointError
		switch {
		case err == nil:
			sent++
		case errors.As(err, &gone):
		case first == nil:
			first = err
		}
	}
	return sent, first
}

// UnregisterDevice removes the device token of role/userID (the user signed out on that phone):
// it deletes the device's SNS endpoint (DeleteEndpoint, a no-op for one already gone) and its row,
// and reports whether there was one. Errors are dispatch errors: invalid_argument on role, user_id
// or token (empty or longer than MaxFCMTokenBytes); unavailable or internal as RegisterDevice's.
func (s *SNS) UnregisterDevice(ctx context.Context, role auth.Role, userID, token string) (bool, error) {
	if err := validateOwner(role, userID); err != nil {
		return false, err
	}
	if token == "" || len(token) > MaxFCMTokenBytes {
		return false, dispatch.Invalid("token", fmt.Sprintf("must be 1..%d bytes", MaxFCMTokenBytes))
	}
	devices, err := pgstore.UserDevices(ctx, s.db.Pool, string(role), userID)
	if err != nil {
		return false, err
	}
	for _, d := range devices {
		// APNs tokens are stored in lower case (validateToken).
		if d.Token != token && (d.Platform == string(PlatformFCM) || d.Token != strings.ToLower(token)) {
			continue
		}
		if s.Enabled() {
			if _, err := s.client.DeleteEndpoint(ctx, &sns.DeleteEndpointInput{EndpointArn: aws.String(d.EndpointARN)}); err != nil && !isNotFound(err) {
				return false, snsError(err)
			}
		}
		return pgstore.DeleteDevice(ctx, s.db.Pool, d.Role, d.UserID, d.Token)
	}
	return false, nil
}
