package main

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/wsgateway"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// defaultLocalRegion is the AWS region of flagdown dev's local WebSocket gateway when AWS_REGION
// is unset (it is then exported, so the functions' SDK signs for it too).
const defaultLocalRegion = "us-east-1"

// notifyIntegration is the gateway path of the notify function's integration route (connect,
// disconnect or message), the local counterpart of the WebSocket API's $connect, $disconnect and
// $default routes.
func notifyIntegration(addr, route string) string {
	return "http://" + addr + "/function/notify/" + route
}

// startPushGateway builds flagdown dev's local API Gateway WebSocket API and mounts it on mux:
// the client endpoint at GET /ws and the management API at /local/@connections/. It points
// cfg.PushEndpoint at it when unset, and makes sure the process environment holds the region and
// the access key pair the in-process functions sign with (push.ManagementFromEnv reads them) and
// the gateway verifies: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY when set, else a random pair
// for the run, exported.
func startPushGateway(cfg *config.Config, addr string, keys *internalauth.Keys, mux *http.ServeMux, log *slog.Logger) (*wsgateway.Gateway, error) {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = defaultLocalRegion
		if err := os.Setenv("AWS_REGION", region); err != nil {
			return nil, fmt.Errorf("push gateway: %w", err)
		}
		log.Info("push: no AWS_REGION set: the local WebSocket gateway uses " + region + " (exported to AWS_REGION)")
	}
	keyID, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if keyID != "" && secret != "" {
		log.Info("push: the local WebSocket gateway accepts management requests signed with AWS_ACCESS_KEY_ID", "access_key_id", keyID)
	} else {
		var err error
		if keyID, secret, err = randomAccessKey(); err != nil {
			return nil, err
		}
		if err := os.Setenv("AWS_ACCESS_KEY_ID", keyID); err != nil {
			return nil, fmt.Errorf("push gateway: %w", err)
		}
		if err := os.Setenv("AWS_SECRET_ACCESS_KEY", secret); err != nil {
			return nil, fmt.Errorf("push gateway: %w", err)
		}
		log.Info("push: no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set: generated a key pair for this run, exported to the process environment, that the local WebSocket gateway verifies", "access_key_id", keyID)
	}
	gw, err := wsgateway.New(wsgateway.Options{
		Region: region, AccessKeyID: keyID, SecretAccessKey: secret,
		ConnectURL:    notifyIntegration(addr, "connect"),
		DisconnectURL: notifyIntegration(addr, "disconnect"),
		MessageURL:    notifyIntegration(addr, "message"),
		Authorize:     keys.SetBearer,
		Log:           log,
	})
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /ws", gw.ClientHandler())
	mux.Handle("/"+gw.Stage()+"/@connections/", gw.ManagementHandler())
	local := "http://" + addr + "/" + gw.Stage()
	if cfg.PushEndpoint == "" {
		cfg.PushEndpoint = local
		log.Info("push: FLAGDOWN_PUSH_ENDPOINT unset: functions push through the local WebSocket gateway", "endpoint", local, "clients", "ws://"+addr+"/ws")
	} else if cfg.PushEndpoint != local {
		log.Info("push: FLAGDOWN_PUSH_ENDPOINT is set: functions push there, not to the local WebSocket gateway", "endpoint", cfg.PushEndpoint)
	}
	return gw, nil
}

// randomAccessKey returns an access key id shaped like AWS's (AKIA and 16 base32 characters) and a
// 40-character secret, both random.
func randomAccessKey() (string, string, error) {
	var id [10]byte
	var sk [30]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", "", fmt.Errorf("push gateway: access key: %w", err)
	}
	if _, err := rand.Read(sk[:]); err != nil {
		return "", "", fmt.Errorf("push gateway: access key: %w", err)
	}
	return "AKIA" + base32.StdEncoding.EncodeToString(id[:]), base64.StdEncoding.EncodeToString(sk[:]), nil
}
