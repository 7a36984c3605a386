package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/auth"
)

// TestTokenCommand: flagdown token mints a token the platform's verifier accepts, with the role and
// subject asked for; a bad role is refused.
func TestTokenCommand(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-test"
	t.Setenv("FLAGDOWN_JWT_SECRET", secret)
	t.Setenv("FLAGDOWN_SECRETS_DIR", t.TempDir())
	var out bytes.Buffer
	cmd := newTokenCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--role", "driver", "--sub", "d-7", "--ttl", "1h"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	v, err := auth.New(auth.Options{Secret: []byte(secret), Issuer: "flagdown", Audience: "flagdown", Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.Verify(strings.TrimSpace(out.String()))
	if err != nil || id != (auth.Identity{Subject: "d-7", Role: auth.RoleDriver}) {
		t.Fatalf("minted token: %v %v", id, err)
	}
	cmd = newTokenCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--role", "root", "--sub", "d-7"})
	if err := cmd.Execute(); err == nil {
		t.Error("--role root accepted")
	}
}

// TestGatewayRefusesClientsWithoutToken: through the platform's gateway a client-facing function
// without a token answers 401 with the JSON error and WWW-Authenticate, never a stack trace.
func TestGatewayRefusesClientsWithoutToken(t *testing.T) {
	p := startTestPlatform(t)
	for _, path := range []string{"/function/ride/00000000-0000-4000-8000-000000000000", "/function/nearby?lat=40.75&lng=-73.98",
		"/function/fare-estimate?pickup=40.7549,-73.9840&dropoff=40.7306,-73.9866"} {
		resp, err := http.Get("http://" + p.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || err != nil || body.Error.Code != "unauthenticated" ||
			!strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("GET %s without a token: %d %q %v, WWW-Authenticate %q", path, resp.StatusCode, body.Error.Code, err, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestTokenMintsEachRole: flagdown token mints every role a duty needs (driver, rider, ops,
// service for the gateway aggregator, admin for reconcile on demand), each one the verifier accepts
// with that role.
func TestTokenMintsEachRole(t *testing.T) {
	const secret = "0123456789abcdef0123456789abcdef-test"
	t.Setenv("FLAGDOWN_JWT_SECRET", secret)
	t.Setenv("FLAGDOWN_SECRETS_DIR", t.TempDir())
	v, err := auth.New(auth.Options{Secret: []byte(secret), Issuer: "flagdown", Audience: "flagdown", Leeway: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"driver", "rider", "ops", "service", "admin"} {
		var out bytes.Buffer
		cmd := newTokenCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs([]string{"--role", role, "--sub", "who-1", "--ttl", "1h"})
		if err := cmd.Execute(); err != nil {
			t.Errorf("--role %s: %v", role, err)
			continue
		}
		id, err := v.Verify(strings.TrimSpace(out.String()))
		if err != nil || id != (auth.Identity{Subject: "who-1", Role: auth.Role(role)}) {
			t.Errorf("--role %s: minted %v %v", role, id, err)
		}
	}
}
