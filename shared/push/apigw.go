package push

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/encoding/httpbinding"
)

// The API Gateway management API (REST JSON, API version 2018-11-29), as AWS documents it:
//
//	POST   {endpoint}/@connections/{connectionId}   body = the message   → 200, empty body
//	GET    {endpoint}/@connections/{connectionId}                        → 200, Connection as JSON
//	DELETE {endpoint}/@connections/{connectionId}                        → 204
//
// where endpoint is https://{api-id}.execute-api.{region}.amazonaws.com/{stage}. Every request is
// signed with AWS Signature Version 4 for the service SigningService. Errors carry their type in
// the HeaderErrorType header and a JSON body {"message": "..."}.

// SigningService is the SigV4 service name of the management API (execute-api:ManageConnections).
const SigningService = "execute-api"

// MaxMessageBytes is the largest message PostToConnection sends: 128 KiB (131,072 bytes), API
// Gateway's WebSocket message payload quota. Larger messages are refused before sending, with the
// same PayloadTooLargeException the API answers.
const MaxMessageBytes = 128 << 10

// HeaderErrorType is the response header that names an error's type; its value may carry a
// suffix after ':' (a namespace URL) that is not part of the type.
const HeaderErrorType = "X-Amzn-Errortype"

// The error types the management API and its SigV4 front door answer.
const (
	// ErrGone (410): no connection with that id exists any more; forget it.
	ErrGone = "GoneException"
	// ErrPayloadTooLarge (413): the message is over MaxMessageBytes.
	ErrPayloadTooLarge = "PayloadTooLargeException"
	// ErrForbidden (403): the caller may not manage connections of this API.
	ErrForbidden = "ForbiddenException"
	// ErrLimitExceeded (429): too many requests per unit of time, or the client's buffer is full.
	ErrLimitExceeded = "LimitExceededException"
	// ErrThrottling (429): the account's request rate is throttled.
	ErrThrottling = "ThrottlingException"
	// ErrMissingAuthenticationToken (403): the request is not signed.
	ErrMissingAuthenticationToken = "MissingAuthenticationTokenException"
	// ErrIncompleteSignature (403): the Authorization header lacks a part SigV4 requires.
	ErrIncompleteSignature = "IncompleteSignatureException"
	// ErrInvalidSignature (403): the signature does not match, or is dated outside the clock window.
	ErrInvalidSignature = "InvalidSignatureException"
	// ErrAccessDenied (403): the access key id is unknown ("The security token included in the
	// request is invalid.").
	ErrAccessDenied = "AccessDeniedException"
)

// Default retry policy of a Management: at most 3 attempts, full-jitter exponential backoff from
// a 20 ms base, one wait at most 500 ms.
const (
	DefaultMaxAttempts = 3
	DefaultRetryBase   = 20 * time.Millisecond
	DefaultRetryCap    = 500 * time.Millisecond
)

// DefaultHTTPTimeout is the timeout of the HTTP client ManagementFromEnv builds (one attempt).
const DefaultHTTPTimeout = 10 * time.Second

// MaxIdleConnsPerEndpoint is how many idle keep-alive connections HTTPClient keeps to the
// management endpoint. Pushes run concurrently (every offer, status and position), and
// net/http's default of 2 would open a new connection (TCP and TLS handshakes) for nearly each.
const MaxIdleConnsPerEndpoint = 64

// HTTPClient returns the HTTP client of a management API client: DefaultHTTPTimeout per attempt
// and MaxIdleConnsPerEndpoint keep-alive connections. Build it once per process (ManagementFromEnv
// does).
func HTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 2*MaxIdleConnsPerEndpoint, MaxIdleConnsPerEndpoint
	return &http.Client{Timeout: DefaultHTTPTimeout, Transport: tr}
}

// Connection is what GetConnection answers about a connection (the API's JSON field names).
type Connection struct {
	// ConnectedAt is when the connection was established.
	ConnectedAt time.Time `json:"connectedAt"`
	// Identity is who connected.
	Identity Identity `json:"identity"`
	// LastActiveAt is when a data message last went either way on the connection.
	LastActiveAt time.Time `json:"lastActiveAt"`
}

// Identity is the client side of a connection.
type Identity struct {
	// SourceIP is the IP address of the TCP connection that opened the socket.
	SourceIP string `json:"sourceIp"`
	// UserAgent is the User-Agent header of the client's upgrade request.
	UserAgent string `json:"userAgent"`
}

// APIError is an error answer of the management API (or a refusal by this client that mirrors
// one, see MaxMessageBytes).
type APIError struct {
	// StatusCode is the HTTP status (410, 413, 403, 429, 5xx, ...).
	StatusCode int
	// Type is the error type of the HeaderErrorType header without its ':' suffix, e.g.
	// "GoneException"; empty when the answer named none.
	Type string
	// Message is the body's "message", or the start of the body when it was not that JSON.
	Message string
}

// Error says the status, the type and the message.
func (e *APIError) Error() string {
	t := e.Type
	if t == "" {
		t = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("push: management API answered %d %s: %s", e.StatusCode, t, e.Message)
}

// apiError returns err's *APIError, or nil.
func apiError(err error) *APIError {
	var e *APIError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// IsGone reports whether err says the connection is gone (410 GoneException): the caller should
// forget that connection id.
func IsGone(err error) bool {
	e := apiError(err)
	return e != nil && (e.StatusCode == http.StatusGone || e.Type == ErrGone)
}

// IsPayloadTooLarge reports whether err says the message was over MaxMessageBytes (413).
func IsPayloadTooLarge(err error) bool {
	e := apiError(err)
	return e != nil && (e.StatusCode == http.StatusRequestEntityTooLarge || e.Type == ErrPayloadTooLarge)
}

// IsForbidden reports whether err is a 403: an unsigned or wrongly signed request, an unknown
// access key, or a caller without execute-api:ManageConnections. Never worth a retry.
func IsForbidden(err error) bool {
	e := apiError(err)
	return e != nil && e.StatusCode == http.StatusForbidden
}

// IsThrottled reports whether err is a 429 (LimitExceededException, ThrottlingException) that
// outlasted the retries.
func IsThrottled(err error) bool {
	e := apiError(err)
	return e != nil && e.StatusCode == http.StatusTooManyRequests
}

// retryable reports whether an answer with this status may succeed when sent again: 429 and 5xx,
// as AWS documents for the management API; never 400, 403, 410 or 413.
func retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// Option configures a Management.
type Option func(*Management)

// WithRetry sets the retry policy: at most maxAttempts attempts (1 = no retry), waiting before
// attempt n+1 a random duration in [0, min(maxDelay, base·2^(n-1))) (full jitter).
func WithRetry(maxAttempts int, base, maxDelay time.Duration) Option {
	return func(m *Management) {
		m.maxAttempts, m.retryBase, m.retryCap = max(1, maxAttempts), base, maxDelay
	}
}

// Management is a client of one API Gateway WebSocket API's management API (one stage). Build one
// per process and share it: it is safe for concurrent use.
type Management struct {
	base        *url.URL
	region      string
	creds       aws.CredentialsProvider
	hc          *http.Client
	signer      *v4.Signer
	maxAttempts int
	retryBase   time.Duration
	retryCap    time.Duration
}

// NewManagement returns a client of the management API at endpoint, the stage URL
// https://{api-id}.execute-api.{region}.amazonaws.com/{stage} (or flagdown dev's
// http://127.0.0.1:8080/local), signing for region with the credentials of creds (cached, so a
// provider that fetches them is asked only when they expire). hc sends the requests; nil is
// http.DefaultClient.
func NewManagement(endpoint, region string, creds aws.CredentialsProvider, hc *http.Client, opts ...Option) (*Management, error) {
	u, err := url.Parse(strings.TrimRight(endpoint, "/"))
	if err != nil {
		return nil, fmt.Errorf("push: management endpoint %q: %w", endpoint, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("push: management endpoint %q: want http(s)://host/stage", endpoint)
	}
	if region == "" {
		return nil, errors.New("push: management API: no AWS region (set AWS_REGION)")
	}
	if creds == nil {
		return nil, errors.New("push: management API: no credentials provider")
	}
	if _, cached := creds.(*aws.CredentialsCache); !cached {
		creds = aws.NewCredentialsCache(creds)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	m := &Management{
		base: u, region: region, creds: creds, hc: hc, signer: v4.NewSigner(),
		maxAttempts: DefaultMaxAttempts, retryBase: DefaultRetryBase, retryCap: DefaultRetryCap,
	}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// Derive returns a client of m's endpoint with m's region, credentials and retry waits that sends
// with hc and makes at most maxAttempts attempts (at least 1): a lane of its own, e.g. the position
// lane's (Pusher.PositionsAsync), whose connections and retries never hold m's.
func (m *Management) Derive(hc *http.Client, maxAttempts int) *Management {
	d := *m
	if hc != nil {
		d.hc = hc
	}
	d.maxAttempts = max(1, maxAttempts)
	return &d
}

// ManagementFromEnv returns a client of the management API at endpoint with the region and the
// credentials of the AWS SDK's default chain (config.LoadDefaultConfig: AWS_REGION,
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, shared config files, web identity,
// container and instance roles) and the HTTP client of HTTPClient.
func ManagementFromEnv(ctx context.Context, endpoint string, opts ...Option) (*Management, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("push: AWS configuration: %w", err)
	}
	return NewManagement(endpoint, cfg.Region, cfg.Credentials, HTTPClient(), opts...)
}

// Endpoint is the stage URL the client talks to.
func (m *Management) Endpoint() string { return m.base.String() }

// PostToConnection sends data to the connection as one message. A 410 (IsGone) means the
// connection no longer exists; data over MaxMessageBytes is refused without sending (413).
func (m *Management) PostToConnection(ctx context.Context, connectionID string, data []byte) error {
	if len(data) > MaxMessageBytes {
		return &APIError{StatusCode: http.StatusRequestEntityTooLarge, Type: ErrPayloadTooLarge,
			Message: fmt.Sprintf("message of %d bytes is over the %d-byte limit", len(data), MaxMessageBytes)}
	}
	_, err := m.do(ctx, http.MethodPost, connectionID, data)
	return err
}

// GetConnection returns what the API knows of the connection; a 410 (IsGone) when it is gone.
func (m *Management) GetConnection(ctx context.Context, connectionID string) (*Connection, error) {
	body, err := m.do(ctx, http.MethodGet, connectionID, nil)
	if err != nil {
		return nil, err
	}
	var c Connection
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, fmt.Errorf("push: GetConnection %s: decode answer: %w", connectionID, err)
	}
	return &c, nil
}

// DeleteConnection closes the connection; a 410 (IsGone) when it was already gone.
func (m *Management) DeleteConnection(ctx context.Context, connectionID string) error {
	_, err := m.do(ctx, http.MethodDelete, connectionID, nil)
	return err
}

// maxAnswerBytes bounds what is read of an answer (a GetConnection JSON or an error body).
const maxAnswerBytes = 64 << 10

// do sends one operation with the retry policy and returns the body of its 2xx answer.
func (m *Management) do(ctx context.Context, method, connectionID string, body []byte) ([]byte, error) {
	if connectionID == "" {
		return nil, errors.New("push: empty connection id")
	}
	var err error
	for attempt := 1; ; attempt++ {
		var status int
		var answer []byte
		status, answer, err = m.once(ctx, method, connectionID, body)
		if err == nil {
			return answer, nil
		}
		if status != 0 && !retryable(status) || attempt >= m.maxAttempts {
			return nil, err
		}
		if ctx.Err() != nil { // ended while the attempt ran: no retry, and the answer says why
			return nil, fmt.Errorf("%w (retry abandoned: %v)", err, ctx.Err())
		}
		// Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter").
		ceiling := min(m.retryCap, m.retryBase<<(attempt-1))
		var wait time.Duration
		if ceiling > 0 {
			wait = rand.N(ceiling)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (retry abandoned: %v)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// once sends one signed attempt. It returns the status (0 when no answer came) and the body of a
// 2xx answer, or an *APIError for any other status.
func (m *Management) once(ctx context.Context, method, connectionID string, body []byte) (int, []byte, error) {
	u := *m.base
	u.Path = m.base.Path + "/@connections/" + connectionID
	// The connection id is one path segment: '/', '+' and '=' escaped the way the AWS SDKs do
	// (everything but unreserved characters), so the signer's canonical URI matches the service's.
	u.RawPath = m.base.EscapedPath() + "/@connections/" + httpbinding.EscapePath(connectionID, true)
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("push: %s %s: %w", method, connectionID, err)
	}
	req.URL = &u // keep RawPath exactly as built
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/octet-stream")
	} else {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	creds, err := m.creds.Retrieve(ctx)
	if err != nil {
		return 0, nil, fmt.Errorf("push: credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	if err := m.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), SigningService, m.region, time.Now()); err != nil {
		return 0, nil, fmt.Errorf("push: sign %s %s: %w", method, connectionID, err)
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("push: %s %s: %w", method, connectionID, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if resp.StatusCode/100 == 2 {
		if err != nil {
			return resp.StatusCode, nil, fmt.Errorf("push: %s %s: read answer: %w", method, connectionID, err)
		}
		return resp.StatusCode, answer, nil
	}
	return resp.StatusCode, nil, parseError(resp, answer)
}

// parseError turns a non-2xx answer into an *APIError.
func parseError(resp *http.Response, body []byte) *APIError {
	e := &APIError{StatusCode: resp.StatusCode, Type: ErrorType(resp.Header.Get(HeaderErrorType))}
	var msg struct {
		Message  *string `json:"message"`
		MessageU *string `json:"Message"`
	}
	switch {
	case json.Unmarshal(body, &msg) == nil && msg.Message != nil:
		e.Message = *msg.Message
	case msg.MessageU != nil:
		e.Message = *msg.MessageU
	default:
		e.Message = strings.TrimSpace(string(body[:min(len(body), 512)]))
	}
	return e
}

// ErrorType returns the error type of a HeaderErrorType value: the part before any ':'
// ("GoneException:http://internal.amazon.com/coral/..." is "GoneException").
func ErrorType(header string) string {
	t, _, _ := strings.Cut(header, ":")
	return strings.TrimSpace(t)
}
