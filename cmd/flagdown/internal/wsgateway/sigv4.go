package wsgateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/flagdown/flagdown/shared/push"
)

// sigv4Algorithm is the only SigV4 algorithm AWS's execute-api accepts in an Authorization header.
const sigv4Algorithm = "AWS4-HMAC-SHA256"

// amzDateFormat is the layout of X-Amz-Date (ISO 8601 basic, UTC).
const amzDateFormat = "20060102T150405Z"

// verifier checks the SigV4 signature of management requests against one credential.
type verifier struct {
	creds  aws.Credentials
	region string
	window time.Duration
	signer *v4.Signer
}

func newVerifier(accessKeyID, secret, region string, window time.Duration) *verifier {
	return &verifier{
		creds:  aws.Credentials{AccessKeyID: accessKeyID, SecretAccessKey: secret},
		region: region, window: window, signer: v4.NewSigner(),
	}
}

// authError is a refusal: its x-amzn-ErrorType and message (always status 403).
type authError struct{ typ, msg string }

// verify recomputes r's signature with the aws-sdk-go-v2 signer over the request's method, path,
// query, the headers it names as signed and the SHA-256 of body, and compares it in constant time.
func (v *verifier) verify(r *http.Request, body []byte, now time.Time) *authError {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return &authError{push.ErrMissingAuthenticationToken, "Missing Authentication Token"}
	}
	fields, ok := parseAuthorization(auth)
	cred, signedHeaders, signature := fields["Credential"], fields["SignedHeaders"], fields["Signature"]
	if !ok || cred == "" || signedHeaders == "" || signature == "" {
		return &authError{push.ErrIncompleteSignature, "Authorization header requires 'Credential', 'Signature' and 'SignedHeaders' parameters of the " + sigv4Algorithm + " scheme."}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return &authError{push.ErrIncompleteSignature, "Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, got '" + cred + "'"}
	}
	akid, day, region, service := scope[0], scope[1], scope[2], scope[3]
	if subtle.ConstantTimeCompare([]byte(akid), []byte(v.creds.AccessKeyID)) != 1 {
		return &authError{push.ErrAccessDenied, "The security token included in the request is invalid."}
	}
	if region != v.region {
		return &authError{push.ErrInvalidSignature, fmt.Sprintf("Credential should be scoped to a valid region, not '%s'.", region)}
	}
	if service != push.SigningService {
		return &authError{push.ErrInvalidSignature, fmt.Sprintf("Credential should be scoped to correct service: '%s'.", push.SigningService)}
	}
	amzDate := r.Header.Get("X-Amz-Date")
	if amzDate == "" {
		return &authError{push.ErrIncompleteSignature, "Authorization header requires existence of a 'X-Amz-Date' header."}
	}
	t, err := time.Parse(amzDateFormat, amzDate)
	if err != nil {
		return &authError{push.ErrInvalidSignature, "X-Amz-Date '" + amzDate + "' is not in the format " + amzDateFormat}
	}
	if day != t.Format("20060102") {
		return &authError{push.ErrInvalidSignature, fmt.Sprintf("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s'", day, t.Format("20060102"))}
	}
	win := int(v.window / time.Minute)
	if t.Before(now.Add(-v.window)) {
		return &authError{push.ErrInvalidSignature, fmt.Sprintf("Signature expired: %s is now earlier than %s (%s - %d min.)",
			amzDate, now.Add(-v.window).UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat), win)}
	}
	if t.After(now.Add(v.window)) {
		return &authError{push.ErrInvalidSignature, fmt.Sprintf("Signature not yet current: %s is still later than %s (%s + %d min.)",
			amzDate, now.Add(v.window).UTC().Format(amzDateFormat), now.UTC().Format(amzDateFormat), win)}
	}
	names := strings.Split(signedHeaders, ";")
	hasHost := false
	for _, n := range names {
		hasHost = hasHost || n == "host"
	}
	if !hasHost {
		return &authError{push.ErrInvalidSignature, "'Host' must be a 'SignedHeader' in the AWS Authorization."}
	}
	want, err := v.recompute(r, names, body, t)
	computed, _ := parseAuthorization(want)
	if err != nil || computed["SignedHeaders"] != signedHeaders ||
		subtle.ConstantTimeCompare([]byte(computed["Signature"]), []byte(signature)) != 1 {
		return &authError{push.ErrInvalidSignature, "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."}
	}
	return nil
}

// recompute signs a copy of r holding only the headers named in signed and returns the
// Authorization header the signer writes.
func (v *verifier) recompute(r *http.Request, signed []string, body []byte, t time.Time) (string, error) {
	u := &url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	c := &http.Request{Method: r.Method, URL: u, Host: r.Host, Header: http.Header{}}
	for _, n := range signed {
		switch n {
		case "host", "x-amz-date":
		case "content-length":
			c.ContentLength = r.ContentLength
		default:
			k := textproto.CanonicalMIMEHeaderKey(n)
			c.Header[k] = r.Header.Values(k)
		}
	}
	sum := sha256.Sum256(body)
	if err := v.signer.SignHTTP(context.Background(), v.creds, c, hex.EncodeToString(sum[:]), push.SigningService, v.region, t); err != nil {
		return "", err
	}
	return c.Header.Get("Authorization"), nil
}

// parseAuthorization splits "AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."
// into its named parts; false for another scheme.
func parseAuthorization(h string) (map[string]string, bool) {
	scheme, rest, _ := strings.Cut(h, " ")
	fields := map[string]string{}
	if scheme != sigv4Algorithm {
		return fields, false
	}
	for _, part := range strings.Split(rest, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok {
			fields[k] = val
		}
	}
	return fields, true
}
