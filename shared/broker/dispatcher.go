package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ceclient "github.com/cloudevents/sdk-go/v2/client"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagdown/flagdown/shared/logging"
	"github.com/flagdown/flagdown/shared/metrics"
	"github.com/flagdown/flagdown/shared/tracing"
)

// Dead-letter message headers. A dead-lettered message carries the original structured event as its
// data, unchanged, and these headers saying why it was dead-lettered.
const (
	// HeaderTrigger names the trigger that could not deliver the event.
	HeaderTrigger = "Flagdown-Trigger"
	// HeaderReason is a human-readable reason: poison (4xx), attempts exhausted, undecodable event.
	HeaderReason = "Flagdown-Dead-Letter-Reason"
	// HeaderLastStatus is the HTTP status of the last delivery attempt, 0 when there was no response.
	HeaderLastStatus = "Flagdown-Last-Status"
	// HeaderDeliveries is how many times the event was delivered to the trigger.
	HeaderDeliveries = "Flagdown-Deliveries"
	// HeaderOriginalSubject is the NATS subject the event was published on.
	HeaderOriginalSubject = "Flagdown-Original-Subject"
)

// DefaultBackOff is the delay before redelivering an event after the 1st, 2nd, ... failed attempt;
// the last value repeats.
var DefaultBackOff = []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second}

// Defaults of the Dispatcher.
const (
	// DefaultWorkers is the number of delivery goroutines per trigger.
	DefaultWorkers = 16
	// DefaultMaxAckPending is the most events a trigger has in flight (delivered, not yet acked).
	DefaultMaxAckPending = 256
	// DefaultDeliveryTimeout bounds one HTTP delivery attempt.
	DefaultDeliveryTimeout = 10 * time.Second
	// DefaultAckWait is how long JetStream waits for an ack before redelivering; it must exceed the
	// delivery timeout plus the time an event waits for a worker.
	DefaultAckWait = 30 * time.Second
	// serverDeliverSlack: the consumer's MaxDeliver is the trigger's MaxDeliver plus this, so that an
	// event whose last attempt timed out (process crash) or whose dead-lettering failed comes back once
	// more and is dead-lettered then instead of being dropped silently by the server.
	serverDeliverSlack = 3
)

// Trigger delivers the events of some types to a function URL, like a Knative Trigger.
type Trigger struct {
	// Name identifies the trigger; the durable consumer's name is derived from it (ConsumerName).
	Name string
	// Types are the CloudEvent types delivered (events.Ride...).
	Types []string
	// URL is where events are POSTed in CloudEvents HTTP binary mode.
	URL string
}

// Stats counts what a Dispatcher did since it was created.
type Stats struct {
	// Delivered is the number of events a trigger URL answered 2xx to.
	Delivered int64
	// Retried is the number of failed attempts (5xx, 408, 429, network error) that were scheduled again.
	Retried int64
	// DeadLettered is the number of events moved to the dead-letter stream.
	DeadLettered int64
}

// DispatcherOption changes a Dispatcher setting.
type DispatcherOption func(*Dispatcher)

// WithBackOff sets the redelivery delays after the 1st, 2nd, ... failed attempt (default DefaultBackOff).
func WithBackOff(delays ...time.Duration) DispatcherOption {
	return func(d *Dispatcher) {
		if len(delays) > 0 {
			d.backoff = append([]time.Duration(nil), delays...)
		}
	}
}

// Dispatcher consumes the broker's stream with one durable pull consumer per Trigger and delivers
// events to the triggers' URLs. Create it with NewDispatcher and call Run.
type Dispatcher struct {
	b               *Broker
	triggers        []Trigger
	maxDeliver      int
	hc              *http.Client
	log             *slog.Logger
	workers         int
	backoff         []time.Duration
	deliveryTimeout time.Duration

	delivered    atomic.Int64
	retried      atomic.Int64
	deadLettered atomic.Int64
}

// NewDispatcher returns a Dispatcher delivering b's events to triggers. maxDeliver (>= 1) is how many
// delivery attempts an event gets before it is dead-lettered (config TriggerMaxDeliver). hc sends the
// requests (nil means a client with DeliveryTimeout); log may be nil.
func NewDispatcher(b *Broker, triggers []Trigger, maxDeliver int, hc *http.Client, log *slog.Logger, opts ...DispatcherOption) (*Dispatcher, error) {
	if b == nil {
		return nil, errors.New("broker: dispatcher needs a broker")
	}
	if maxDeliver < 1 {
		return nil, fmt.Errorf("broker: max deliver must be >= 1, got %d", maxDeliver)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{
		b: b, maxDeliver: maxDeliver, log: log,
		workers: DefaultWorkers, backoff: DefaultBackOff, deliveryTimeout: DefaultDeliveryTimeout,
	}
	for _, o := range opts {
		o(d)
	}
	if hc == nil {
		hc = &http.Client{Timeout: d.deliveryTimeout}
	}
	// Drain response bodies so that connections are reused (the SDK closes them unread).
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hcCopy := *hc
	hcCopy.Transport = drainingTransport{base: base}
	d.hc = &hcCopy

	names := map[string]bool{}
	for _, t := range triggers {
		if t.Name == "" || t.URL == "" || len(t.Types) == 0 {
			return nil, fmt.Errorf("broker: trigger %q needs a name, a URL and at least one type", t.Name)
		}
		cn := ConsumerName(t.Name)
		if names[cn] {
			return nil, fmt.Errorf("broker: two triggers map to consumer %s", cn)
		}
		names[cn] = true
		for _, typ := range t.Types {
			if !validSubject(b.Subject(typ)) {
				return nil, fmt.Errorf("broker: trigger %s: type %q cannot be used in a NATS subject", t.Name, typ)
			}
		}
		d.triggers = append(d.triggers, t)
	}
	return d, nil
}

var nonNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// ConsumerName returns the durable JetStream consumer name of the trigger called name.
func ConsumerName(name string) string { return "trigger-" + nonNameChars.ReplaceAllString(name, "_") }

// Stats returns the counters so far.
func (d *Dispatcher) Stats() Stats {
	return Stats{Delivered: d.delivered.Load(), Retried: d.retried.Load(), DeadLettered: d.deadLettered.Load()}
}

// item is one message handed to a worker, with its event decoded (or the decoding error).
type item struct {
	msg    jetstream.Msg
	ev     event.Event
	decErr error
}

// runner is the state of one trigger while the Dispatcher runs.
type runner struct {
	d *Dispatcher
	// conn is the trigger's own connection (Broker.Dedicated): its consumer's fetches and acks.
	conn   *Broker
	t      Trigger
	ce     ceclient.Client
	queues []chan item
	wg     sync.WaitGroup
	cc     jetstream.ConsumeContext
	// types, when set, are the only event types delivered; others are acked unseen (old servers).
	types map[string]bool

	closeOnce sync.Once
}

// Run creates or updates each trigger's durable consumer (filter subjects = the trigger's types,
// explicit acks, MaxAckPending DefaultMaxAckPending), consumes and delivers events until ctx is done,
// then stops fetching, finishes the events already received and returns nil. It returns an error if
// a consumer cannot be set up.
func (d *Dispatcher) Run(ctx context.Context) error {
	// Deliveries in flight when ctx ends run to completion (bounded by the delivery timeout).
	workCtx := context.WithoutCancel(ctx)
	var runners []*runner
	stopAll := func() {
		for _, r := range runners {
			r.stop()
		}
	}
	for _, t := range d.triggers {
		r, err := d.start(ctx, workCtx, t)
		if err != nil {
			stopAll()
			return err
		}
		runners = append(runners, r)
	}
	d.log.Info("dispatcher running", "triggers", len(runners), "stream", d.b.stream)
	<-ctx.Done()
	stopAll()
	d.log.Info("dispatcher stopped", "delivered", d.delivered.Load(), "retried", d.retried.Load(), "dead_lettered", d.deadLettered.Load())
	return nil
}

func (d *Dispatcher) start(ctx, workCtx context.Context, t Trigger) (*runner, error) {
	seen := map[string]bool{}
	var subjects []string
	for _, typ := range t.Types {
		s := d.b.Subject(typ)
		if !seen[s] {
			seen[s] = true
			subjects = append(subjects, s)
		}
	}
	sort.Strings(subjects)
	ackWait := DefaultAckWait
	if w := 3 * d.deliveryTimeout; w > ackWait {
		ackWait = w
	}
	name := ConsumerName(t.Name)
	cfg := jetstream.ConsumerConfig{
		Name:          name,
		Durable:       name,
		Description:   "flagdown trigger " + t.Name + " -> " + t.URL,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    d.maxDeliver + serverDeliverSlack,
		MaxAckPending: DefaultMaxAckPending,
	}
	var types map[string]bool
	switch {
	case len(subjects) == 1:
		cfg.FilterSubject = subjects[0]
	case d.b.multiFilter():
		cfg.FilterSubjects = subjects
	default:
		// nats-server before 2.10 allows one filter subject per consumer. Consume every event of
		// the stream and skip (ack) the types the trigger does not want, which keeps one consumer
		// per trigger and the publication order across its types.
		d.log.Info("nats-server lacks multiple filter subjects; trigger filters types itself",
			"trigger", t.Name, "server_version", d.b.nc.ConnectedServerVersion())
		cfg.FilterSubject = d.b.prefix + ".>"
		types = map[string]bool{}
		for _, typ := range t.Types {
			types[typ] = true
		}
	}
	// Each trigger consumes on a connection of its own: match's fetches and acks never wait for
	// notify's, or for the relay's publishes, on one connection.
	conn, err := d.b.Dedicated("flagdown-" + name)
	if err != nil {
		return nil, err
	}
	cons, err := conn.js.CreateOrUpdateConsumer(ctx, d.b.stream, cfg)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("broker: consumer %s on %s: %w", name, d.b.stream, err)
	}
	p, err := cehttp.New(cehttp.WithTarget(t.URL))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("broker: trigger %s: http protocol: %w", t.Name, err)
	}
	p.Client = d.hc
	ce, err := ceclient.New(p)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("broker: trigger %s: cloudevents client: %w", t.Name, err)
	}
	r := &runner{d: d, conn: conn, t: t, ce: ce, types: types}
	for i := 0; i < d.workers; i++ {
		q := make(chan item, 4)
		r.queues = append(r.queues, q)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for it := range q {
				r.handle(workCtx, it)
			}
		}()
	}
	cc, err := cons.Consume(r.route,
		jetstream.PullMaxMessages(2*d.workers),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			d.log.Warn("trigger consume error", "trigger", t.Name, "err", err)
		}))
	if err != nil {
		r.closeQueues()
		conn.Close()
		return nil, fmt.Errorf("broker: consume %s: %w", name, err)
	}
	r.cc = cc
	return r, nil
}

// route decodes a message and queues it to the worker owning its CloudEvent subject.
func (r *runner) route(msg jetstream.Msg) {
	it := item{msg: msg}
	if err := json.Unmarshal(msg.Data(), &it.ev); err != nil {
		it.decErr = err
	} else if r.types != nil && !r.types[it.ev.Type()] {
		_ = msg.Ack()
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(it.ev.Subject()))
	r.queues[int(h.Sum32()%uint32(len(r.queues)))] <- it
}

// stop drains the consumer, lets the workers finish what they hold and waits for them.
func (r *runner) stop() {
	if r.cc != nil {
		r.cc.Drain()
		select {
		case <-r.cc.Closed():
		case <-time.After(r.d.deliveryTimeout + 5*time.Second):
			r.d.log.Warn("trigger drain timed out, stopping", "trigger", r.t.Name)
			r.cc.Stop()
			select {
			case <-r.cc.Closed():
			case <-time.After(5 * time.Second):
				// The consume callback may still run: leave the queues open rather than panic.
				r.d.log.Error("trigger consumer did not stop", "trigger", r.t.Name)
				return
			}
		}
	}
	r.closeQueues()
	r.wg.Wait()
	r.conn.Close() // after the workers: their acks and naks go out on it
}

// closeQueues ends the workers once no more messages can be routed.
func (r *runner) closeQueues() {
	r.closeOnce.Do(func() {
		for _, q := range r.queues {
			close(q)
		}
	})
}

// handle makes one delivery attempt and acks, naks or dead-letters the message.
func (r *runner) handle(ctx context.Context, it item) {
	d := r.d
	attempt := 1
	if md, err := it.msg.Metadata(); err == nil {
		attempt = int(md.NumDelivered)
	}
	log := d.log.With("trigger", r.t.Name, "event_id", it.ev.ID(), "type", it.ev.Type(),
		logging.EventSubject(it.ev.Type(), it.ev.Subject()), "attempt", attempt)
	if it.decErr != nil {
		r.deadLetter(ctx, it, attempt, 0, "undecodable event: "+it.decErr.Error(), log)
		return
	}
	if err := it.ev.Validate(); err != nil {
		r.deadLetter(ctx, it, attempt, 0, "invalid CloudEvent: "+strings.TrimSpace(err.Error()), log)
		return
	}
	if attempt > d.maxDeliver {
		r.deadLetter(ctx, it, attempt, 0, fmt.Sprintf("delivery attempts exhausted (%d of %d, last attempt unacknowledged)", attempt, d.maxDeliver), log)
		return
	}

	// The delivery is a span continuing the event's trace (its traceparent attribute, which goes
	// to the function unchanged as ce-traceparent); the request's traceparent header names this
	// span, so the function's spans nest under it.
	spanCtx, span, traceHeaders := tracing.StartDeliver(ctx, it.ev, it.msg.Subject(), ConsumerName(r.t.Name), attempt)
	if traceHeaders != nil {
		spanCtx = cehttp.WithCustomHeader(spanCtx, traceHeaders)
	}
	sendCtx, cancel := context.WithTimeout(spanCtx, d.deliveryTimeout)
	res := r.ce.Send(sendCtx, it.ev)
	cancel()
	status := 0
	var hr *cehttp.Result
	if errors.As(res, &hr) {
		status = hr.StatusCode
	}
	var failed error
	if !protocol.IsACK(res) {
		failed = res
	}
	tracing.EndDeliver(span, status, failed)
	switch {
	case protocol.IsACK(res):
		if err := it.msg.Ack(); err != nil {
			log.Warn("ack failed; the event may be delivered again", "err", err)
		}
		d.delivered.Add(1)
		metrics.TriggerDeliveries.WithLabelValues(r.t.Name).Inc()
	case status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("rejected by the trigger URL with HTTP %d: %s", status, shorten(res)), log)
	case attempt >= d.maxDeliver:
		r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("delivery attempts exhausted (%d of %d): %s", attempt, d.maxDeliver, shorten(res)), log)
	default:
		delay := d.backoff[min(attempt-1, len(d.backoff)-1)]
		log.Warn("delivery failed, will retry", "status", status, "err", shorten(res), "retry_in_ms", delay.Milliseconds())
		if err := it.msg.NakWithDelay(delay); err != nil {
			log.Warn("nak failed; the event comes back after the ack wait", "err", err)
		}
		d.retried.Add(1)
		metrics.TriggerRetries.WithLabelValues(r.t.Name).Inc()
	}
}

// deadLetter publishes the original message on the dead-letter subject with headers naming the
// trigger, the last status and the reason, then terminates it. If the dead-letter publish fails the
// message is nak'ed so that it comes back and is dead-lettered again.
func (r *runner) deadLetter(ctx context.Context, it item, attempt, status int, reason string, log *slog.Logger) {
	d := r.d
	typ := it.ev.Type()
	if it.decErr != nil || !validSubject(d.b.DLQSubject(typ)) {
		typ = strings.TrimPrefix(it.msg.Subject(), d.b.prefix+".")
	}
	dlq := nats.NewMsg(d.b.DLQSubject(typ))
	dlq.Data = it.msg.Data()
	dlq.Header.Set("Content-Type", ContentTypeStructured)
	dlq.Header.Set(HeaderTrigger, r.t.Name)
	dlq.Header.Set(HeaderReason, reason)
	dlq.Header.Set(HeaderLastStatus, strconv.Itoa(status))
	dlq.Header.Set(HeaderDeliveries, strconv.Itoa(attempt))
	dlq.Header.Set(HeaderOriginalSubject, it.msg.Subject())
	msgID := it.ev.ID()
	if md, err := it.msg.Metadata(); err == nil && (it.decErr != nil || msgID == "") {
		msgID = "seq-" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	pubCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := d.b.js.PublishMsg(pubCtx, dlq, jetstream.WithMsgID(msgID+"/"+r.t.Name), jetstream.WithExpectStream(d.b.dlqStream))
	if err != nil {
		log.Error("dead-letter publish failed; will retry", "err", err, "reason", reason)
		_ = it.msg.NakWithDelay(d.backoff[len(d.backoff)-1])
		return
	}
	// Plain Term: servers before 2.11 do not understand a reason (it is in the headers anyway).
	if err := it.msg.Term(); err != nil {
		log.Warn("term failed; the event may come back and be dead-lettered again (de-duplicated)", "err", err)
	}
	d.deadLettered.Add(1)
	metrics.TriggerDeadLetters.WithLabelValues(r.t.Name).Inc()
	log.Error("event dead-lettered", "status", status, "reason", reason, "dlq_subject", dlq.Subject)
}

// shorten renders a delivery result for logs and headers, at most 200 bytes.
func shorten(err error) string {
	if err == nil {
		return ""
	}
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// drainingTransport reads what is left of a response body (up to 64 KiB) before closing it, so the
// connection goes back to the pool.
type drainingTransport struct{ base http.RoundTripper }

// RoundTrip sends req through the wrapped transport and hands back its response with a draining body.
func (t drainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	resp.Body = drainingBody{resp.Body}
	return resp, nil
}

type drainingBody struct{ io.ReadCloser }

// Close reads what is left of the body (up to 64 KiB) before closing it, so the connection can be reused.
func (b drainingBody) Close() error {
	_, _ = io.Copy(io.Discard, io.LimitReader(b.ReadCloser, 64<<10))
	return b.ReadCloser.Close()
}
