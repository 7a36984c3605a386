package push_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/flagdown/flagdown/shared/push"
)

const (
	testRegion = "eu-west-3"
	testKeyID  = "AKIDFLAGDOWNTEST"
	testSecret = "flagdown-test-secret"
)

// request is what the test server saw of one request.
type request struct {
	method, rawPath, auth, date, contentType string
	body                                     []byte
}

// apiServer answers each request with the next of answers (the last one repeats), as the real
// API does: status, x-amzn-ErrorType (with the service's namespace suffix) and {"message"}.
type answer struct {
	status  int
	errType string
	body    string
}

func apiServer(t *testing.T, answers ...answer) (*httptest.Server, func() []request) {
	t.Helper()
	var mu sync.Mutex
	var seen []request
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, request{r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"), r.Header.Get("X-Amz-Date"), r.Header.Get("Content-Type"), b})
		mu.Unlock()
		a := answers[min(int(n.Add(1))-1, len(answers)-1)]
		if a.errType != "" {
			w.Header().Set("x-amzn-ErrorType", a.errType+":http://internal.amazon.com/coral/com.amazonaws.apigatewaymanagementapi/")
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []request {
		mu.Lock()
		defer mu.Unlock()
		return append([]request(nil), seen...)
	}
}

func newClient(t *testing.T, endpoint string, opts ...push.Option) *push.Management {
	t.Helper()
	m, err := push.NewManagement(endpoint, testRegion, credentials.NewStaticCredentialsProvider(testKeyID, testSecret, ""), nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestPostSignsAndEscapesTheConnectionID(t *testing.T) {
	srv, seen := apiServer(t, answer{status: 200})
	m := newClient(t, srv.URL+"/prod/")
	if err := m.PostToConnection(context.Background(), "ab+c/d==", []byte(`{"type":"offer"}`)); err != nil {
		t.Fatal(err)
	}
	reqs := seen()
	if len(reqs) != 1 {
		t.Fatalf("got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if got, want := r.rawPath, "/prod/@connections/ab%2Bc%2Fd%3D%3D"; got != want {
		t.Errorf("path %q, want %q", got, want)
	}
	if r.method != http.MethodPost || string(r.body) != `{"type":"offer"}` || r.contentType != "application/octet-stream" {
		t.Errorf("got %s %q content-type %q", r.method, r.body, r.contentType)
	}
	wantPrefix := "AWS4-HMAC-SHA256 Credential=" + testKeyID + "/" + r.date[:8] + "/" + testRegion + "/execute-api/aws4_request, SignedHeaders="
	if !strings.HasPrefix(r.auth, wantPrefix) || !strings.Contains(r.auth, "host;") || !strings.Contains(r.auth, "x-amz-date") {
		t.Errorf("Authorization %q, want a SigV4 header starting %q", r.auth, wantPrefix)
	}
}

func TestGetConnectionDecodesTheAPIJSON(t *testing.T) {
	srv, seen := apiServer(t, answer{status: 200, body: `{"connectedAt":"2026-12-01T12:00:00.123Z","identity":{"sourceIp":"192.0.2.7","userAgent":"flagdown-driver/3.1"},"lastActiveAt":"2026-12-01T12:05:00.000Z"}`})
	m := newClient(t, srv.URL+"/local")
	c, err := m.GetConnection(context.Background(), "L0SM9cOFvHcCIhw=")
	if err != nil {
		t.Fatal(err)
	}
	want := push.Connection{
		ConnectedAt:  time.Date(2026, 12, 1, 12, 0, 0, 123e6, time.UTC),
		Identity:     push.Identity{SourceIP: "192.0.2.7", UserAgent: "flagdown-driver/3.1"},
		LastActiveAt: time.Date(2026, 12, 1, 12, 5, 0, 0, time.UTC),
	}
	if !c.ConnectedAt.Equal(want.ConnectedAt) || !c.LastActiveAt.Equal(want.LastActiveAt) || c.Identity != want.Identity {
		t.Errorf("got %+v, want %+v", *c, want)
	}
	if r := seen()[0]; r.method != http.MethodGet || r.rawPath != "/local/@connections/L0SM9cOFvHcCIhw%3D" {
		t.Errorf("got %s %s", r.method, r.rawPath)
	}
}

func TestRetryPolicy(t *testing.T) {
	gone := answer{status: 410, errType: push.ErrGone, body: `{"message":null}`}
	tooBig := answer{status: 413, errType: push.ErrPayloadTooLarge, body: `{"message":"Message too long"}`}
	forbidden := answer{status: 403, errType: push.ErrForbidden, body: `{"message":"Forbidden"}`}
	bad := answer{status: 400, errType: "BadRequestException", body: `{"message":"Invalid connectionId"}`}
	limit := answer{status: 429, errType: push.ErrLimitExceeded, body: `{"message":"Rate exceeded"}`}
	throttled := answer{status: 429, errType: push.ErrThrottling, body: `{"message":"Rate exceeded"}`}
	unavailable := answer{status: 503, errType: "ServiceUnavailableException", body: `{"message":"Service Unavailable"}`}
	ok := answer{status: 200}
	for _, tc := range []struct {
		name     string
		answers  []answer
		attempts int
		check    func(error) bool
		wantType string
	}{
		{"410 not retried", []answer{gone, ok}, 1, push.IsGone, push.ErrGone},
		{"413 not retried", []answer{tooBig, ok}, 1, push.IsPayloadTooLarge, push.ErrPayloadTooLarge},
		{"403 not retried", []answer{forbidden, ok}, 1, push.IsForbidden, push.ErrForbidden},
		{"400 not retried", []answer{bad, ok}, 1, func(err error) bool { return err != nil }, "BadRequestException"},
		{"429 retried until success", []answer{limit, throttled, ok}, 3, func(err error) bool { return err == nil }, ""},
		{"503 retried until success", []answer{unavailable, ok}, 2, func(err error) bool { return err == nil }, ""},
		{"429 exhausts the attempts", []answer{limit}, 3, push.IsThrottled, push.ErrLimitExceeded},
		{"503 exhausts the attempts", []answer{unavailable}, 3, func(err error) bool { return err != nil }, "ServiceUnavailableException"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, seen := apiServer(t, tc.answers...)
			m := newClient(t, srv.URL+"/prod", push.WithRetry(3, time.Millisecond, 4*time.Millisecond))
			err := m.PostToConnection(context.Background(), "abc=", []byte("hi"))
			if !tc.check(err) {
				t.Errorf("error %v: check failed", err)
			}
			if got := len(seen()); got != tc.attempts {
				t.Errorf("%d attempts, want %d", got, tc.attempts)
			}
			if tc.wantType != "" {
				var e *push.APIError
				if !errors.As(err, &e) || e.Type != tc.wantType || e.StatusCode != tc.answers[0].status {
					t.Errorf("error %#v, want type %s status %d", err, tc.wantType, tc.answers[0].status)
				}
			}
		})
	}
}

func TestErrorMessageAndType(t *testing.T) {
	srv, _ := apiServer(t, answer{status: 410, errType: push.ErrGone, body: `{"message":"connection abc= is gone"}`})
	err := newClient(t, srv.URL+"/prod").DeleteConnection(context.Background(), "abc=")
	var e *push.APIError
	if !errors.As(err, &e) {
		t.Fatalf("got %v, want an *APIError", err)
	}
	if e.Type != push.ErrGone || e.Message != "connection abc= is gone" || e.StatusCode != 410 {
		t.Errorf("got %+v", *e)
	}
}

func TestPayloadOverTheLimitIsRefusedLocally(t *testing.T) {
	srv, seen := apiServer(t, answer{status: 200})
	m := newClient(t, srv.URL+"/prod")
	err := m.PostToConnection(context.Background(), "abc=", make([]byte, push.MaxMessageBytes+1))
	var e *push.APIError
	if !errors.As(err, &e) || e.StatusCode != 413 || e.Type != push.ErrPayloadTooLarge || !push.IsPayloadTooLarge(err) {
		t.Fatalf("got %v, want 413 %s", err, push.ErrPayloadTooLarge)
	}
	if n := len(seen()); n != 0 {
		t.Errorf("%d requests sent, want none", n)
	}
	if err := m.PostToConnection(context.Background(), "abc=", make([]byte, push.MaxMessageBytes)); err != nil {
		t.Errorf("a message of exactly %d bytes: %v", push.MaxMessageBytes, err)
	}
	if r := seen(); len(r) != 1 || len(r[0].body) != push.MaxMessageBytes {
		t.Errorf("the message at the limit was not sent whole")
	}
}

func TestRetryStopsWhenTheContextEnds(t *testing.T) {
	srv, seen := apiServer(t, answer{status: 503, errType: "ServiceUnavailableException"})
	// Waits of up to an hour: only the context can end them.
	m := newClient(t, srv.URL+"/prod", push.WithRetry(10, time.Hour, time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for len(seen()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err := m.PostToConnection(ctx, "abc=", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("got %v, want the 503 abandoned on context cancel", err)
	}
	if n := len(seen()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestNewManagementValidates(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider(testKeyID, testSecret, "")
	for _, tc := range []struct{ endpoint, region string }{
		{"ftp://example.com/prod", testRegion},
		{"https:///prod", testRegion},
		{"https://abc.execute-api.eu-west-3.amazonaws.com/prod", ""},
	} {
		if _, err := push.NewManagement(tc.endpoint, tc.region, creds, nil); err == nil {
			t.Errorf("NewManagement(%q, %q): no error", tc.endpoint, tc.region)
		}
	}
}

func TestManagementFromEnv(t *testing.T) {
	t.Setenv("AWS_REGION", testRegion)
	t.Setenv("AWS_ACCESS_KEY_ID", testKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testSecret)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	srv, seen := apiServer(t, answer{status: 204})
	m, err := push.ManagementFromEnv(context.Background(), srv.URL+"/prod")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteConnection(context.Background(), "abc="); err != nil {
		t.Fatal(err)
	}
	r := seen()[0]
	if r.method != http.MethodDelete || !strings.Contains(r.auth, "Credential="+testKeyID+"/") || !strings.Contains(r.auth, "/"+testRegion+"/execute-api/") {
		t.Errorf("got %s with Authorization %q", r.method, r.auth)
	}
}
