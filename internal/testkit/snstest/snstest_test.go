package snstest_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/flagdown/flagdown/internal/testkit/snstest"
)

var app = snstest.AppARN("GCM", "flagdown-android")

func client(t *testing.T, srv *snstest.Server, opts ...func(*awsconfig.LoadOptions) error) *sns.Client {
	t.Helper()
	cfg, err := awsconfig.LoadDefaultConfig(context.Background(), append(snstest.ConfigOptions(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return sns.NewFromConfig(cfg, func(o *sns.Options) { o.BaseEndpoint = aws.String(srv.URL) })
}

// signed returns a POST of form to srv signed with SigV4 for service in snstest.Region.
func signed(t *testing.T, srv *snstest.Server, form url.Values, service, secret string) *http.Request {
	t.Helper()
	body := form.Encode()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	sum := sha256.Sum256([]byte(body))
	creds := aws.Credentials{AccessKeyID: snstest.AccessKeyID, SecretAccessKey: secret}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, req, hex.EncodeToString(sum[:]), service, snstest.Region, time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

type errorResponse struct {
	XMLName xml.Name `xml:"http://sns.amazonaws.com/doc/2010-03-31/ ErrorResponse"`
	Type    string   `xml:"Error>Type"`
	Code    string   `xml:"Error>Code"`
	Message string   `xml:"Error>Message"`
	ID      string   `xml:"RequestId"`
}

func do(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestSignature: unsigned, wrongly scoped, wrongly keyed and tampered requests get SNS's 403/400
// error XML; a correctly signed one SNS's success XML.
func TestSignature(t *testing.T) {
	srv := snstest.New(t)
	form := url.Values{"Action": {"CreatePlatformEndpoint"}, "Version": {snstest.Version},
		"PlatformApplicationArn": {app}, "Token": {"tok-1"}}

	unsigned, _ := http.NewRequest(http.MethodPost, srv.URL+"/", strings.NewReader(form.Encode()))
	unsigned.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	tampered := signed(t, srv, form, "sns", snstest.SecretAccessKey)
	tampered.Body = io.NopCloser(strings.NewReader(strings.Replace(form.Encode(), "tok-1", "tok-2", 1)))
	for name, tc := range map[string]struct {
		req    *http.Request
		status int
		code   string
	}{
		"Unsigned":     {unsigned, 403, "MissingAuthenticationToken"},
		"OtherService": {signed(t, srv, form, "sqs", snstest.SecretAccessKey), 403, "SignatureDoesNotMatch"},
		"WrongSecret":  {signed(t, srv, form, "sns", "not-the-secret"), 403, "SignatureDoesNotMatch"},
		"Tampered":     {tampered, 403, "SignatureDoesNotMatch"},
	} {
		t.Run(name, func(t *testing.T) {
			resp, body := do(t, tc.req)
			var e errorResponse
			if err := xml.Unmarshal(body, &e); err != nil {
				t.Fatalf("answer is not SNS's ErrorResponse: %v: %s", err, body)
			}
			if resp.StatusCode != tc.status || e.Code != tc.code || e.Type != "Sender" || e.Message == "" {
				t.Errorf("answer %d %+v, want %d Sender %s with a message", resp.StatusCode, e, tc.status, tc.code)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/xml" || e.ID == "" || resp.Header.Get("x-amzn-RequestId") != e.ID {
				t.Errorf("Content-Type %q, RequestId %q, header %q; want text/xml and one request id", ct, e.ID, resp.Header.Get("x-amzn-RequestId"))
			}
		})
	}
	if n := len(srv.Endpoints()); n != 0 {
		t.Errorf("refused requests created %d endpoints", n)
	}

	resp, body := do(t, signed(t, srv, form, "sns", snstest.SecretAccessKey))
	var ok struct {
		XMLName     xml.Name `xml:"http://sns.amazonaws.com/doc/2010-03-31/ CreatePlatformEndpointResponse"`
		EndpointArn string   `xml:"CreatePlatformEndpointResult>EndpointArn"`
		RequestID   string   `xml:"ResponseMetadata>RequestId"`
	}
	if err := xml.Unmarshal(body, &ok); err != nil || resp.StatusCode != 200 {
		t.Fatalf("signed request: %d %v: %s", resp.StatusCode, err, body)
	}
	if eps := srv.Endpoints(); len(eps) != 1 || eps[0].ARN != ok.EndpointArn || ok.RequestID == "" {
		t.Errorf("answer %+v, endpoints %+v; want the one endpoint's ARN and a request id", ok, eps)
	}
	if got := srv.Requests(); len(got) != 5 || got[4].Auth.Service != "sns" || got[0].Action != "CreatePlatformEndpoint" {
		t.Errorf("recorded %d requests (last signed for %q), want all 5, refused ones included", len(got), got[len(got)-1].Auth.Service)
	}
}

// TestSDKWithWrongCredentials: the real client's errors carry SNS's code and status.
func TestSDKWithWrongCredentials(t *testing.T) {
	srv := snstest.New(t)
	c := client(t, srv, awsconfig.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(snstest.AccessKeyID, "wrong", "")))
	_, err := c.CreatePlatformEndpoint(context.Background(), &sns.CreatePlatformEndpointInput{PlatformApplicationArn: aws.String(app), Token: aws.String("t")})
	var api smithy.APIError
	var re *smithyhttp.ResponseError
	if !errors.As(err, &api) || api.ErrorCode() != "SignatureDoesNotMatch" || !errors.As(err, &re) || re.HTTPStatusCode() != 403 {
		t.Fatalf("err = %v, want SignatureDoesNotMatch, 403", err)
	}
}

// TestSNSSemantics: the SNS behaviours the push fallback relies on, through the real client.
func TestSNSSemantics(t *testing.T) {
	ctx := context.Background()
	srv := snstest.New(t)
	c := client(t, srv)

	create := func(token, cud string) (string, error) {
		out, err := c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{
			PlatformApplicationArn: aws.String(app), Token: aws.String(token), CustomUserData: aws.String(cud)})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.EndpointArn), nil
	}
	arn, err := create("tok-1", "driver:d-1")
	if err != nil || !strings.HasPrefix(arn, "arn:aws:sns:us-east-1:123456789012:endpoint/GCM/flagdown-android/") {
		t.Fatalf("create = %q, %v", arn, err)
	}
	if again, err := create("tok-1", "driver:d-1"); again != arn || err != nil {
		t.Errorf("same token and attributes: %q, %v; want the same endpoint %s", again, err, arn)
	}
	_, err = create("tok-1", "driver:d-2")
	var ip *types.InvalidParameterException
	if !errors.As(err, &ip) || ip.ErrorMessage() != "Invalid parameter: Token Reason: Endpoint "+arn+" already exists with the same Token, but different attributes." {
		t.Errorf("same token, other attributes: %v, want InvalidParameter naming %s", err, arn)
	}
	_, err = c.CreatePlatformEndpoint(ctx, &sns.CreatePlatformEndpointInput{
		PlatformApplicationArn: aws.String(snstest.AppARN("APNS", "ios")), Token: aws.String("not-hex")})
	if !errors.As(err, &ip) || !strings.Contains(ip.ErrorMessage(), "iOS device tokens must be no more than 400 hexadecimal characters") {
		t.Errorf("APNs token not hex: %v, want SNS's InvalidParameter", err)
	}

	attrs, err := c.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn)})
	if err != nil || attrs.Attributes["Enabled"] != "true" || attrs.Attributes["Token"] != "tok-1" || attrs.Attributes["CustomUserData"] != "driver:d-1" {
		t.Errorf("GetEndpointAttributes = %v, %v", attrs, err)
	}
	_, err = c.GetEndpointAttributes(ctx, &sns.GetEndpointAttributesInput{EndpointArn: aws.String(arn + "x")})
	var nf *types.NotFoundException
	var re *smithyhttp.ResponseError
	if !errors.As(err, &nf) || !errors.As(err, &re) || re.HTTPStatusCode() != 404 {
		t.Errorf("unknown endpoint: %v, want NotFound, 404", err)
	}

	publish := func(message string) error {
		_, err := c.Publish(ctx, &sns.PublishInput{TargetArn: aws.String(arn), MessageStructure: aws.String("json"), Message: aws.String(message)})
		return err
	}
	if err := publish(`{"GCM":"{}"}`); !errors.As(err, &ip) {
		t.Errorf("json message without default: %v, want InvalidParameter", err)
	}
	if err := publish(`{"default":"d","GCM":"{\"data\":{\"k\":\"v\"}}"}`); err != nil {
		t.Fatal(err)
	}
	if ep, _ := srv.Endpoint(arn); len(ep.Delivered) != 1 || ep.Delivered[0] != `{"data":{"k":"v"}}` {
		t.Errorf("delivered %v, want the GCM payload", ep.Delivered)
	}
	srv.SetEndpointEnabled(arn, false)
	var disabled *types.EndpointDisabledException
	if err := publish(`{"default":"d"}`); !errors.As(err, &disabled) || !errors.As(err, &re) || re.HTTPStatusCode() != 400 {
		t.Errorf("publish to a disabled endpoint: %v, want EndpointDisabled, 400", err)
	}
	if _, err := c.SetEndpointAttributes(ctx, &sns.SetEndpointAttributesInput{EndpointArn: aws.String(arn),
		Attributes: map[string]string{"Enabled": "true"}}); err != nil {
		t.Fatal(err)
	}
	if err := publish(`{"default":"d"}`); err != nil {
		t.Errorf("publish after enabling: %v", err)
	}
	srv.FailEndpoint(arn, "Throttled", "")
	var th *types.ThrottledException
	if err := publish(`{"default":"d"}`); !errors.As(err, &th) || !errors.As(err, &re) || re.HTTPStatusCode() != 429 {
		t.Errorf("FailEndpoint Throttled: %v, want Throttled, 429", err)
	}
	srv.ClearFailure(arn)
	if _, err := c.DeleteEndpoint(ctx, &sns.DeleteEndpointInput{EndpointArn: aws.String(arn)}); err != nil {
		t.Fatal(err)
	}
	if _, exists := srv.Endpoint(arn); exists {
		t.Error("endpoint still there after DeleteEndpoint")
	}
	if _, err := c.DeleteEndpoint(ctx, &sns.DeleteEndpointInput{EndpointArn: aws.String(arn)}); err != nil {
		t.Errorf("DeleteEndpoint is idempotent in SNS: %v", err)
	}
}
