//go:build !production

package main

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/flagdown/flagdown/cmd/flagdown/internal/wsgateway"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/push"
)

// defaultLocalRegion is the AWS region of flagdown dev's local WebSocket gateway when AWS_REGION
// is unset.
const defaultLocalRegion = "us-east-1"

// notifyIntegration is the gateway path of the notify function's integration route (connect,
// disconnect or message), the local counterpart of the WebSocket API's $connect, $disconnect and
// $default routes.
func notifyIntegration(addr, route string) string {
	return "http://" + addr + "/function/notify/" + route
}

// startPushGateway builds flagdown dev's local API Gateway WebSocket API and mounts it on mux:
// the client endpoint at GET /ws and the management API at /local/@connections/. It points
// cfg.PushEndpoint at it when unset. The gateway verifies management requests signed with
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for AWS_REGION when those are set, else with a random
// key pair for the run in us-east-1; it returns the management client the in-process functions
// push with (the same aws-sdk-go-v2-signed client as in AWS, given that pair instead of the
// credential chain, so several platforms in one process never share credentials through the
// environment), or nil when FLAGDOWN_PUSH_ENDPOINT names another endpoint.
func startPushGateway(cfg *config.Config, addr string, keys *internalauth.Tokens, mux *http.ServeMux, log *slog.Logger) (*wsgateway.Gateway, *push.Management, error) {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = defaultLocalRegion
	}
	keyID, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	if keyID != "" && secret != "" {
		log.Info("push: the local WebSocket gateway accepts management requests signed with AWS_ACCESS_KEY_ID", "access_key_id", keyID, "region", region)
	} else {
		var err error
		if keyID, secret, err = randomAccessKey(); err != nil {
			return nil, nil, err
		}
		log.Info("push: no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set: the local WebSocket gateway and the functions share a key pair generated for this run", "access_key_id", keyID, "region", region)
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
		return nil, nil, err
	}
	mux.Handle("GET /ws", gw.ClientHandler())
	mux.Handle("/"+gw.Stage()+"/@connections/", gw.ManagementHandler())
	local := "http://" + addr + "/" + gw.Stage()
	if cfg.PushEndpoint != "" && cfg.PushEndpoint != local {
		log.Info("push: FLAGDOWN_PUSH_ENDPOINT is set: functions push there, not to the local WebSocket gateway", "endpoint", cfg.PushEndpoint)
		return gw, nil, nil
	}
	cfg.PushEndpoint = local
	log.Info("push: functions push through the local WebSocket gateway", "endpoint", local, "clients", "ws://"+addr+"/ws")
	m, err := push.NewManagement(local, region, credentials.NewStaticCredentialsProvider(keyID, secret, ""),
		push.HTTPClient())
	if err != nil {
		_ = gw.Close()
		return nil, nil, err
	}
	return gw, m, nil
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
