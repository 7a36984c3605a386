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
	b, err := broker.Connect(ctx, cfg.NATSURL, cfg.NATSStream, cfg.SubjectPrefix)
	if err != nil {
		return nil, nil, "", err
	}
	return b.Publish, b.Close, "nats " + cfg.NATSURL + " stream " + cfg.NATSStream, nil
}

// signingKeys returns the internal credential the relay and the expiry source sign events with. It
// is required: consumers refuse unsigned events, so publishing without it would only fill the
// dead-letter stream.
func signingKeys(cfg *config.Config) (*internalauth.Keys, error) {
	keys, err := internalauth.Parse(cfg.InternalSecret)
	if err != nil {
		return nil, err
	}
	if !keys.Configured() {
		return nil, fmt.Errorf("set %s (env, or the secret file %s): the functions refuse unsigned events",
			internalauth.Variable, config.SecretFileName(internalauth.Variable))
	}
	return keys, nil
}
