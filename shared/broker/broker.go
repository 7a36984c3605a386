// Package broker is flagdown's event broker on NATS JetStream, the local stand-in for a Knative
// Broker with Triggers.
//
// Events are CloudEvents published in structured JSON mode on the subject <prefix>.<type> of one
// stream, with the event id as Nats-Msg-Id so that a re-publish (an outbox relay restarting after a
// crash) is de-duplicated by JetStream. A Dispatcher delivers the events of chosen types to function
// URLs in CloudEvents HTTP binary mode, retries failures with backoff, and moves events that cannot be
// delivered to a dead-letter stream on <prefix>-dlq.<type>.
package broker

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagdown/flagdown/shared/dispatch"
)

// DuplicateWindow is how long JetStream remembers published event ids to drop re-publishes.
const DuplicateWindow = 5 * time.Minute

// Retention is how long the events stream keeps an event (its MaxAge), and DLQRetention how long
// the dead-letter stream keeps one. shared/internalauth.MinMaxAge, the shortest maximum event age a
// consumer may accept, equals Retention (a test keeps them equal).
const (
	Retention    = 7 * 24 * time.Hour
	DLQRetention = 30 * 24 * time.Hour
)

// ContentTypeStructured is the Content-Type header of messages on the broker: structured CloudEvents.
const ContentTypeStructured = "application/cloudevents+json"

// StartEmbedded starts an in-process nats-server with JetStream listening on 127.0.0.1:port (port 0
// or -1 picks a free port), storing streams under storeDir. It returns the server, whose Shutdown
// the caller must call, and its client URL.
func StartEmbedded(storeDir string, port int) (*server.Server, string, error) {
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "flagdown-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   storeDir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, "", fmt.Errorf("broker: embedded nats-server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, "", fmt.Errorf("broker: embedded nats-server not ready after 10s")
	}
	return ns, ns.ClientURL(), nil
}

// Broker publishes flagdown events to a JetStream stream. It is safe for concurrent use.
type Broker struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	stream    string
	dlqStream string
	prefix    string
	// url and nopts are how nc was made, for Dedicated.
	url   string
	nopts []nats.Option
}

// Connect connects to the NATS server at url and makes sure two streams exist: stream, on the
// subjects <subjectPrefix>.> (file storage, DuplicateWindow de-duplication), and the dead-letter
// stream <stream>_DLQ on <subjectPrefix>-dlq.>. Existing streams are updated to this configuration.
// opts add credentials and TLS (WithCredentials), nats.go options, or ExistingStreams.
func Connect(ctx context.Context, url, stream, subjectPrefix string, opts ...Option) (*Broker, error) {
	var co connectOptions
	for _, o := range opts {
		o(&co)
	}
	if stream == "" || strings.ContainsAny(stream, ". *>\t\r\n/\\") {
		return nil, fmt.Errorf("broker: invalid stream name %q", stream)
	}
	if !validSubject(subjectPrefix) {
		return nil, fmt.Errorf("broker: invalid subject prefix %q", subjectPrefix)
	}
	nopts := append([]nats.Option{
		nats.Name("flagdown"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, co.nats...)
	nc, err := nats.Connect(url, nopts...)
	if err != nil {
		return nil, dispatch.Unavailable("nats", fmt.Errorf("broker: connect %s: %w", url, err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: jetstream: %w", err)
	}
	b := &Broker{nc: nc, js: js, stream: stream, dlqStream: stream + "_DLQ", prefix: subjectPrefix, url: url, nopts: nopts}
	streams := []jetstream.StreamConfig{
		{
			Name:        b.stream,
			Description: "flagdown events (CloudEvents, structured JSON)",
			Subjects:    []string{subjectPrefix + ".>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  DuplicateWindow,
			MaxAge:      Retention,
		},
		{
			Name:        b.dlqStream,
			Description: "flagdown events that a trigger could not deliver",
			Subjects:    []string{subjectPrefix + "-dlq.>"},
			Storage:     jetstream.FileStorage,
			Retention:   jetstream.LimitsPolicy,
			Duplicates:  DuplicateWindow,
			MaxAge:      DLQRetention,
		},
	}
	for _, cfg := range streams {
		if co.existing {
			if _, err := js.Stream(ctx, cfg.Name); err != nil {
				nc.Close()
				return nil, dispatch.Unavailable("nats", fmt.Errorf("broker: stream %s: %w", cfg.Name, err))
			}
			continue
		}
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			nc.Close()
			return nil, dispatch.Unavailable("nats", fmt.Errorf("broker: ensure stream %s: %w", cfg.Name, err))
		}
	}
	return b, nil
}

// Dedicated returns a Broker on a NATS connection of its own, named name, to the same server with
// the same credentials, streams and subjects; it neither creates nor updates a stream. A
// Dispatcher consumes each trigger on one (its fetches and acks never queue behind another
// trigger's, nor behind the relay's publishes, on one connection's lock and socket). Close it
// when done.
func (b *Broker) Dedicated(name string) (*Broker, error) {
	opts := append(append([]nats.Option(nil), b.nopts...), nats.Name(name))
	nc, err := nats.Connect(b.url, opts...)
	if err != nil {
		return nil, dispatch.Unavailable("nats", fmt.Errorf("broker: connect %s (%s): %w", b.url, name, err))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: jetstream (%s): %w", name, err)
	}
	d := *b
	d.nc, d.js = nc, js
	return &d, nil
}

// validSubject reports whether s is a literal NATS subject: dot-separated non-empty tokens without
// wildcards or whitespace.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}

// Subject returns the subject events of type typ are published on: <prefix>.<type>.
func (b *Broker) Subject(typ string) string { return b.prefix + "." + typ }

// DLQSubject returns the subject dead-lettered events of type typ are published on: <prefix>-dlq.<type>.
func (b *Broker) DLQSubject(typ string) string { return b.prefix + "-dlq." + typ }

// Stream returns the name of the events stream.
func (b *Broker) Stream() string { return b.stream }

// DLQStream returns the name of the dead-letter stream (<stream>_DLQ).
func (b *Broker) DLQStream() string { return b.dlqStream }

// JetStream returns the JetStream context, for tools and tests that read the streams.
func (b *Broker) JetStream() jetstream.JetStream { return b.js }

// Publish validates e and publishes it in structured JSON mode on Subject(e.Type()) with
// Nats-Msg-Id = e.ID(), waiting for the stream's acknowledgement. JSON data is written into the
// envelope byte for byte (never compacted or re-escaped), so the digest a consumer checks
// (shared/internalauth) is the digest of the bytes the publisher signed. A publish of an id already seen
// within DuplicateWindow is acknowledged by JetStream without storing the event again.
// Broker failures are dispatch.CodeUnavailable errors.
func (b *Broker) Publish(ctx context.Context, e event.Event) error {
	if err := e.Validate(); err != nil {
		return fmt.Errorf("broker: publish invalid event %s: %w", e.ID(), err)
	}
	subject := b.Subject(e.Type())
	if !validSubject(subject) {
		return fmt.Errorf("broker: event type %q cannot be used in a NATS subject", e.Type())
	}
	// e.MarshalJSON, not json.Marshal: encoding/json compacts and HTML-escapes a Marshaler's output,
	// which would change the signed data bytes.
	body, err := e.MarshalJSON()
	if err != nil {
		return fmt.Errorf("broker: encode event %s: %w", e.ID(), err)
	}
	msg := nats.NewMsg(subject)
	msg.Header.Set("Content-Type", ContentTypeStructured)
	msg.Data = body
	if _, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(e.ID()), jetstream.WithExpectStream(b.stream)); err != nil {
		return dispatch.Unavailable("nats", fmt.Errorf("broker: publish %s %s: %w", e.Type(), e.ID(), err))
	}
	return nil
}

// multiFilter reports whether the server supports consumers with several filter subjects (2.10+).
func (b *Broker) multiFilter() bool {
	var major, minor int
	if _, err := fmt.Sscanf(b.nc.ConnectedServerVersion(), "%d.%d", &major, &minor); err != nil {
		return true
	}
	return major > 2 || (major == 2 && minor >= 10)
}

// Close flushes and closes the NATS connection.
func (b *Broker) Close() {
	_ = b.nc.FlushTimeout(2 * time.Second)
	b.nc.Close()
}
