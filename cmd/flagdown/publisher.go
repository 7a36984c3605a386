package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/flagdown/flagdown/shared/broker"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
	"github.com/flagdown/flagdown/shared/tracing"
)

// errNoBroker: the long-running parts publish to a running broker; they do not embed one.
var errNoBroker = errors.New("set K_SINK (a Knative Broker's ingress) or NATS_URL (the cluster's NATS, or a running flagdown dev's)")

// eventPublisher returns where the relay and the expiry source publish: the CloudEvents HTTP sink
// at K_SINK when set (Knative), otherwise the NATS JetStream broker at NATS_URL (OpenFaaS, flagdown
// dev). It also returns a close function and a description for logs. It names the broker in the
// publish spans' messaging.system (tracing.SetPublishSystem).
func eventPublisher(ctx context.Context, cfg *config.Config) (broker.PublishFunc, func(), string, error) {
	if cfg.EventSink != "" {
		tracing.SetPublishSystem(tracing.SystemKnative)
		p, err := broker.HTTPSink(cfg.EventSink, nil)
		return p, func() {}, "sink " + cfg.EventSink, err
	}
	if cfg.NATSURL == "" {
		return nil, nil, "", errNoBroker
	}
	b, err := broker.Connect(ctx, cfg.NATSURL, cfg.NATSStream, cfg.SubjectPrefix, broker.WithCredentials(broker.ConfigCredentials(cfg)))
	if err != nil {
		return nil, nil, "", err
	}
	return b.Publish, b.Close, "nats " + cfg.NATSURL + " stream " + cfg.NATSStream, nil
}

// eventSigner returns the private key the relay and the expiry source sign events with
// (FLAGDOWN_EVENT_SIGNING_KEY). It is required: consumers refuse unsigned events, so publishing
// without it would only fill the dead-letter stream.
func eventSigner(cfg *config.Config) (*internalauth.Signer, error) {
	s, err := internalauth.ParseSigner(cfg.EventSigningKey)
	if err != nil {
		return nil, err
	}
	if !s.Configured() {
		return nil, fmt.Errorf("set %s (env, or the secret file %s; `flagdown keygen` makes one): the functions refuse unsigned events",
			internalauth.SigningKeyVariable, config.SecretFileName(internalauth.SigningKeyVariable))
	}
	return s, nil
}

// internalTokens returns the bearer token internal calls that are not events carry
// (FLAGDOWN_INTERNAL_TOKEN); it is required by the commands that make such calls.
func internalTokens(cfg *config.Config) (*internalauth.Tokens, error) {
	t, err := internalauth.ParseTokens(cfg.InternalToken)
	if err != nil {
		return nil, err
	}
	if !t.Configured() {
		return nil, fmt.Errorf("set %s (env, or the secret file %s): internal endpoints refuse calls without it",
			internalauth.TokenVariable, config.SecretFileName(internalauth.TokenVariable))
	}
	return t, nil
}
