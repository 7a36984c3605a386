package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
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
	// HeaderReason is a human-readable reason: rejected (4xx), attempts exhausted, target unavailable
	// past the limit, undecodable event.
	HeaderReason = "Flagdown-Dead-Letter-Reason"
	// HeaderLastStatus is the HTTP status of the last delivery attempt, 0 when there was no response.
	HeaderLastStatus = "Flagdown-Last-Status"
	// HeaderDeliveries is how many times the event was delivered to the trigger.
	HeaderDeliveries = "Flagdown-Deliveries"
	// HeaderOriginalSubject is the NATS subject the event was published on.
	HeaderOriginalSubject = "Flagdown-Original-Subject"
)

// DefaultBackOff is the delay before redelivering an event after the 1st, 2nd, ... failed attempt,
// and before the 1st, 2nd, ... retry of an attempt the target answered unavailable; the last value
// repeats (the cap).
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
	// DefaultUnavailableLimit is how long one delivery of an event waits for a target that answers
	// unavailable (see Dispatcher) before the event is dead-lettered (config TriggerUnavailableLimit).
	DefaultUnavailableLimit = 15 * time.Minute
	// serverDeliverSlack: the consumer's MaxDeliver is the trigger's MaxDeliver plus this. Deliveries
	// that ended without an outcome (handed back when the dispatcher stopped, unacknowledged when it
	// crashed) count in the server's tally too; the slack leaves room for them, and the server's last
	// delivery is attempted once and dead-lettered unless it succeeds, never dropped silently.
	serverDeliverSlack = 20
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
	// Retried is the number of failed attempts (500 and other 5xx but 502, 503, 504; 408; a broken
	// connection) that were scheduled again, each spending one of the event's MaxDeliver attempts.
	Retried int64
	// Unavailable is the number of attempts the target answered unavailable (429, 502, 503, 504,
	// connection refused, timeout), each retried in place without spending an attempt.
	Unavailable int64
	// Released is the number of events handed back to the broker undelivered because the dispatcher
	// stopped: they are delivered again once a dispatcher runs.
	Released int64
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

// WithUnavailableLimit sets how long one delivery of an event waits for a target that keeps
// answering unavailable before the event is dead-lettered (default DefaultUnavailableLimit; <= 0
// keeps the default).
func WithUnavailableLimit(limit time.Duration) DispatcherOption {
	return func(d *Dispatcher) {
		if limit > 0 {
			d.unavailableLimit = limit
		}
	}
}

// Dispatcher consumes the broker's stream with one durable pull consumer per Trigger and delivers
// events to the triggers' URLs. Create it with NewDispatcher and call Run.
//
// An attempt's outcome decides what happens to the event:
//   - 2xx: acknowledged.
//   - rejected, 4xx but 408 and 429: dead-lettered at once (the event cannot be processed).
//   - failed, 500 and the other 5xx but 502, 503, 504, 408 or a connection broken after the
//     request was sent: redelivered after the back-off, dead-lettered at the MaxDeliver-th delivery.
//   - unavailable, 429, 502, 503 or 504 (a function whose dependency is away, a gateway with no
//     replica), a connection that could not be made (refused, no route, DNS) or a delivery timeout:
//     the target is away, not the event bad. The worker keeps the event (its ack wait extended) and
//     tries again after the back-off delays (honouring a longer Retry-After), without spending a
//     delivery, until the target answers otherwise or the unavailable limit has passed since its
//     first unavailable answer; then the event is dead-lettered. Events of the same subject wait
//     behind it, in order.
//
// When Run's context ends, the consumer stops fetching, an attempt in progress finishes, and every
// event received but not delivered is handed back to the broker at once (Stats.Released) to be
// delivered by the next dispatcher; none is dead-lettered for it.
type Dispatcher struct {
	b               *Broker
	triggers        []Trigger
	maxDeliver      int
	hc              *http.Client
	log             *slog.Logger
	workers         int
	backoff         []time.Duration
	deliveryTimeout time.Duration
	// unavailableLimit bounds one delivery's wait for an unavailable target.
	unavailableLimit time.Duration
	// ackWait, when set, replaces the consumer's computed ack wait (tests).
	ackWait time.Duration

	delivered    atomic.Int64
	retried      atomic.Int64
	unavailable  atomic.Int64
	released     atomic.Int64
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
		unavailableLimit: DefaultUnavailableLimit,
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
	return Stats{Delivered: d.delivered.Load(), Retried: d.retried.Load(), Unavailable: d.unavailable.Load(),
		Released: d.released.Load(), DeadLettered: d.deadLettered.Load()}
}

// serverMaxDeliver is the consumer's MaxDeliver: the server's last delivery of an event.
func (d *Dispatcher) serverMaxDeliver() int { return d.maxDeliver + serverDeliverSlack }

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
	// quit is closed when the dispatcher stops: workers hand back what they hold.
	quit     chan struct{}
	quitOnce sync.Once
	// held are the messages received and not yet settled (queued or being delivered); the
	// heartbeat extends their ack wait so that the server does not redeliver them meanwhile.
	heldMu sync.Mutex
	held   map[jetstream.Msg]struct{}
	// beatDone ends the heartbeat once the workers are done.
	beatDone chan struct{}
	beatWG   sync.WaitGroup

	closeOnce sync.Once
}

// Run creates or updates each trigger's durable consumer (filter subjects = the trigger's types,
// explicit acks, MaxAckPending DefaultMaxAckPending, MaxDeliver the budget plus 20), consumes and
// delivers events until ctx is done, then stops fetching, lets the attempts in progress finish (each
// bounded by the delivery timeout), hands every other received event back to the broker and returns
// nil. It returns an error if a consumer cannot be set up.
func (d *Dispatcher) Run(ctx context.Context) error {
	// Deliveries in flight when ctx ends run to completion (bounded by the delivery timeout).
	workCtx := context.WithoutCancel(ctx)
	var runners []*runner
	stopAll := func() {
		// Every trigger hands back what it holds at once; then each drains in turn.
		for _, r := range runners {
			r.quitOnce.Do(func() { close(r.quit) })
		}
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
	d.log.Info("dispatcher stopped", "delivered", d.delivered.Load(), "retried", d.retried.Load(),
		"unavailable", d.unavailable.Load(), "released", d.released.Load(), "dead_lettered", d.deadLettered.Load())
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
	if d.ackWait > 0 {
		ackWait = d.ackWait
	}
	name := ConsumerName(t.Name)
	cfg := jetstream.ConsumerConfig{
		Name:          name,
		Durable:       name,
		Description:   "flagdown trigger " + t.Name + " -> " + t.URL,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    d.serverMaxDeliver(),
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
	r := &runner{d: d, conn: conn, t: t, ce: ce, types: types, quit: make(chan struct{}),
		held: map[jetstream.Msg]struct{}{}, beatDone: make(chan struct{})}
	r.beatWG.Add(1)
	go r.heartbeat(ackWait / 3)
	for i := 0; i < d.workers; i++ {
		// Room for every message the server lets the trigger hold (MaxAckPending): route never
		// blocks, so no message waits unseen in the client's buffer while its ack wait runs out.
		q := make(chan item, DefaultMaxAckPending)
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
		r.wg.Wait()
		r.endHeartbeat()
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
	r.hold(msg)
	h := fnv.New32a()
	_, _ = h.Write([]byte(it.ev.Subject()))
	r.queues[int(h.Sum32()%uint32(len(r.queues)))] <- it
}

// hold records msg as received and not yet settled.
func (r *runner) hold(msg jetstream.Msg) {
	r.heldMu.Lock()
	r.held[msg] = struct{}{}
	r.heldMu.Unlock()
}

// settle forgets msg once it was acked, nak'ed, terminated or handed back.
func (r *runner) settle(msg jetstream.Msg) {
	r.heldMu.Lock()
	delete(r.held, msg)
	r.heldMu.Unlock()
}

// heartbeat tells the server, every period, that each held message is still being worked on
// (InProgress resets its ack wait), until endHeartbeat.
func (r *runner) heartbeat(period time.Duration) {
	defer r.beatWG.Done()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-r.beatDone:
			return
		case <-tick.C:
		}
		r.heldMu.Lock()
		msgs := make([]jetstream.Msg, 0, len(r.held))
		for m := range r.held {
			msgs = append(msgs, m)
		}
		r.heldMu.Unlock()
		for _, m := range msgs {
			// An error means the message was settled meanwhile, or the connection is away (the
			// server then redelivers after the ack wait, as it would have).
			_ = m.InProgress()
		}
	}
}

// endHeartbeat stops the heartbeat and waits for it.
func (r *runner) endHeartbeat() {
	close(r.beatDone)
	r.beatWG.Wait()
}

// stopping reports whether the dispatcher is stopping.
func (r *runner) stopping() bool {
	select {
	case <-r.quit:
		return true
	default:
		return false
	}
}

// stop stops fetching, lets an attempt in progress finish, hands back every other message received
// and waits for the workers.
func (r *runner) stop() {
	r.quitOnce.Do(func() { close(r.quit) })
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
	r.endHeartbeat()
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

// outcome classifies a failed delivery attempt.
type outcome int

const (
	// failed: the target failed on this event (500, 408, a connection broken mid-request); it is
	// redelivered and spends one of its MaxDeliver attempts.
	failed outcome = iota
	// rejected: the target refused the event (4xx but 408 and 429); dead-lettered at once.
	rejected
	// unavailable: the target is away (429, 502, 503, 504, no connection, timeout); retried in place
	// without spending an attempt, up to the unavailable limit.
	unavailable
)

// classify says what a failed attempt with HTTP status (0: no response) and result res means.
func classify(status int, res error) outcome {
	switch {
	case status == http.StatusTooManyRequests, status == http.StatusBadGateway,
		status == http.StatusServiceUnavailable, status == http.StatusGatewayTimeout:
		return unavailable
	case status == http.StatusRequestTimeout:
		return failed
	case status >= 400 && status < 500:
		return rejected
	case status != 0:
		return failed
	}
	// No response: a connection that could not be made (refused, no route, DNS, dial timeout) or
	// an answer that did not come within the delivery timeout is the target being away.
	var op *net.OpError
	if errors.As(res, &op) && op.Op == "dial" {
		return unavailable
	}
	var dns *net.DNSError
	if errors.As(res, &dns) || errors.Is(res, context.DeadlineExceeded) {
		return unavailable
	}
	var ne net.Error
	if errors.As(res, &ne) && ne.Timeout() {
		return unavailable
	}
	return failed
}

// handle delivers one message: it acks it, dead-letters it, naks it for a counted retry, keeps
// retrying in place while the target is unavailable, or hands it back when the dispatcher stops.
func (r *runner) handle(ctx context.Context, it item) {
	defer r.settle(it.msg)
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
	// The server's last delivery cannot be handed back or redelivered: it gets one attempt and is
	// dead-lettered unless that attempt succeeds.
	last := attempt >= d.serverMaxDeliver()
	var since time.Time // the target's first unavailable answer to this delivery
	for retry := 0; ; retry++ {
		if r.stopping() {
			r.release(it, log)
			return
		}
		status, res, wait := r.send(ctx, it, attempt)
		if protocol.IsACK(res) {
			if err := it.msg.Ack(); err != nil {
				log.Warn("ack failed; the event may be delivered again", "err", err)
			}
			d.delivered.Add(1)
			metrics.TriggerDeliveries.WithLabelValues(r.t.Name).Inc()
			return
		}
		switch classify(status, res) {
		case rejected:
			r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("rejected by the trigger URL with HTTP %d: %s", status, shorten(res)), log)
			return
		case failed:
			if attempt >= d.maxDeliver || last {
				r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("delivery attempts exhausted (%d of %d): %s", attempt, d.maxDeliver, shorten(res)), log)
				return
			}
			delay := d.backoff[min(attempt-1, len(d.backoff)-1)]
			log.Warn("delivery failed, will retry", "status", status, "err", shorten(res), "retry_in_ms", delay.Milliseconds())
			if err := it.msg.NakWithDelay(delay); err != nil {
				log.Warn("nak failed; the event comes back after the ack wait", "err", err)
			}
			d.retried.Add(1)
			metrics.TriggerRetries.WithLabelValues(r.t.Name).Inc()
			return
		}
		// Unavailable.
		d.unavailable.Add(1)
		metrics.TriggerUnavailable.WithLabelValues(r.t.Name).Inc()
		now := time.Now()
		if since.IsZero() {
			since = now
		}
		switch {
		case last:
			r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("target unavailable at the last delivery the broker makes (%d): %s", attempt, shorten(res)), log)
			return
		case now.Sub(since) >= d.unavailableLimit:
			r.deadLetter(ctx, it, attempt, status, fmt.Sprintf("target unavailable for %s (limit %s): %s",
				now.Sub(since).Round(time.Second), d.unavailableLimit, shorten(res)), log)
			return
		}
		delay := max(d.backoff[min(retry, len(d.backoff)-1)], wait)
		delay = min(delay, d.unavailableLimit-now.Sub(since))
		if retry == 0 {
			log.Warn("trigger URL unavailable; holding the event and retrying", "status", status, "err", shorten(res),
				"retry_in_ms", delay.Milliseconds(), "limit", d.unavailableLimit.String())
		} else {
			log.Debug("trigger URL still unavailable", "status", status, "err", shorten(res),
				"retry_in_ms", delay.Milliseconds(), "unavailable_for_ms", now.Sub(since).Milliseconds())
		}
		timer := time.NewTimer(delay)
		select {
		case <-timer.C:
		case <-r.quit:
			timer.Stop()
			r.release(it, log)
			return
		}
	}
}

// send makes one delivery attempt of it and returns the HTTP status (0 when there was no
// response), the result, and the Retry-After the target asked for (0 when none).
func (r *runner) send(ctx context.Context, it item, attempt int) (int, protocol.Result, time.Duration) {
	d := r.d
	// The delivery is a span continuing the event's trace (its traceparent attribute, which goes
	// to the function unchanged as ce-traceparent); the request's traceparent header names this
	// span, so the function's spans nest under it.
	spanCtx, span, traceHeaders := tracing.StartDeliver(ctx, it.ev, it.msg.Subject(), ConsumerName(r.t.Name), attempt)
	if traceHeaders != nil {
		spanCtx = cehttp.WithCustomHeader(spanCtx, traceHeaders)
	}
	ra := new(retryAfter)
	sendCtx, cancel := context.WithTimeout(context.WithValue(spanCtx, retryAfterKey{}, ra), d.deliveryTimeout)
	res := r.ce.Send(sendCtx, it.ev)
	cancel()
	status := 0
	var hr *cehttp.Result
	if errors.As(res, &hr) {
		status = hr.StatusCode
	}
	var failure error
	if !protocol.IsACK(res) {
		failure = res
	}
	tracing.EndDeliver(span, status, failure)
	return status, res, ra.get()
}

// release hands a message back to the broker undelivered (the dispatcher stops): it is redelivered
// at once to whichever dispatcher runs next, and is not dead-lettered for it.
func (r *runner) release(it item, log *slog.Logger) {
	if err := it.msg.Nak(); err != nil {
		log.Warn("hand-back failed; the event comes back after the ack wait", "err", err)
	}
	r.d.released.Add(1)
	metrics.TriggerReleased.WithLabelValues(r.t.Name).Inc()
	log.Info("dispatcher stopping: event handed back to the broker undelivered")
}

// maxRetryAfter caps the Retry-After a target may ask for.
const maxRetryAfter = 5 * time.Minute

// retryAfterKey is the context key of a delivery's *retryAfter.
type retryAfterKey struct{}

// retryAfter receives the Retry-After header (delay-seconds) of a delivery's response.
type retryAfter struct {
	mu sync.Mutex
	d  time.Duration
}

func (ra *retryAfter) set(h string) {
	s, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || s <= 0 {
		return
	}
	ra.mu.Lock()
	ra.d = min(time.Duration(s)*time.Second, maxRetryAfter)
	ra.mu.Unlock()
}

func (ra *retryAfter) get() time.Duration {
	ra.mu.Lock()
	defer ra.mu.Unlock()
	return ra.d
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
// connection goes back to the pool, and hands a response's Retry-After to the delivery that sent it.
type drainingTransport struct{ base http.RoundTripper }

// RoundTrip sends req through the wrapped transport and hands back its response with a draining body.
func (t drainingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if ra, ok := req.Context().Value(retryAfterKey{}).(*retryAfter); ok {
		if h := resp.Header.Get("Retry-After"); h != "" {
			ra.set(h)
		}
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		return resp, nil
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
