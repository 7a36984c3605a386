package chaos

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// dupBatch is how many events one EventsDupReorder fault publishes again, taken from the last
// dupWindow events of the stream.
const (
	dupBatch  = 25
	dupWindow = 400
)

// inject injects one fault of kind k and waits until what it broke is running again.
func (r *run) inject(ctx context.Context, k Kind) error {
	var detail string
	switch k {
	case PlatformKill:
		r.scrapeRepairs(ctx)
		end := r.outageBegin(string(k))
		r.dev.kill()
		time.Sleep(time.Duration(200+r.rng.IntN(1500)) * time.Millisecond)
		// A restart after SIGKILL runs with the right clock again.
		err := r.startDev(ctx, 0)
		end()
		if err != nil {
			return err
		}
	case PlatformClockOffset:
		off := 2 * time.Second
		if r.rng.IntN(2) == 0 {
			off = -off
		}
		r.scrapeRepairs(ctx)
		end := r.outageBegin(string(k))
		r.dev.stop()
		err := r.startDev(ctx, off)
		end()
		if err != nil {
			return err
		}
		detail = "clock " + off.String()
		r.sum.ClockOffsets = append(r.sum.ClockOffsets, off.String())
	case ExpirySourceKill:
		r.expiry2.kill()
		if err := r.expiry2.start(); err != nil {
			return err
		}
	case RedisPubSubKill:
		n, err := r.redis.killPubSub(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no pub/sub connection to kill")
		}
		detail = fmt.Sprintf("%d connections", n)
	case RedisRestartNoSave, RedisRestartSave:
		down := time.Duration(300+r.rng.IntN(1500)) * time.Millisecond
		end := r.outageBegin(string(k))
		err := r.redis.restart(ctx, k == RedisRestartSave, down)
		end()
		if err != nil {
			return err
		}
		detail = "down " + down.Round(time.Millisecond).String() + ", " + r.checkNotifications(ctx, string(k))
	case RedisSIGSTOP:
		end := r.outageBegin(string(k))
		err := r.redis.stopFor(ctx, r.opts.RedisStop)
		end()
		if err != nil {
			return err
		}
		detail = "stopped " + r.opts.RedisStop.String()
		// With a Sentinel the frozen primary was failed over (it is down longer than
		// sentinelDownAfter): the promoted replica must be configured as a new generation.
		if swapped, err := r.followPrimary(ctx); err != nil {
			return err
		} else if swapped {
			detail += ", failed over to port " + strconv.Itoa(r.redis.port) + ", " + r.checkNotifications(ctx, string(k))
		}
	case RedisFailover:
		end := r.outageBegin(string(k))
		down, err := r.failover(ctx)
		end()
		if err != nil {
			return err
		}
		detail = fmt.Sprintf("primary SIGKILLed, port %d promoted, no primary for %s, %s", r.redis.port,
			down.Round(time.Millisecond), r.checkNotifications(ctx, string(k)))
	case PostgresRestart:
		if r.pg == nil {
			return fmt.Errorf("no private PostgreSQL in this run")
		}
		down := time.Duration(300+r.rng.IntN(1700)) * time.Millisecond
		end := r.outageBegin(string(k))
		err := r.pg.restart(ctx, down)
		end()
		if err != nil {
			return err
		}
		detail = "immediate shutdown, down " + down.Round(time.Millisecond).String()
	case PlatformSIGSTOP:
		// A pause shorter than a third of the heartbeat TTL (a long GC, a VM steal, a debugger):
		// requests in flight stop anywhere, between a commit and its Redis effects too, and no
		// heartbeat lapses because of the pause alone.
		pause := min(time.Second+time.Duration(r.rng.Int64N(int64(3*time.Second))), r.opts.HeartbeatTTL/3)
		end := r.outageBegin(string(k))
		if !r.dev.send(syscall.SIGSTOP) {
			end()
			return fmt.Errorf("flagdown dev is not running")
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		ok := r.dev.send(syscall.SIGCONT)
		end()
		if !ok {
			return fmt.Errorf("flagdown dev exited while stopped")
		}
		detail = "paused " + pause.Round(time.Millisecond).String()
	case EventsDupReorder:
		n, err := r.duplicateEvents(ctx)
		if err != nil {
			return err
		}
		r.sum.EventsRepublished += n
		detail = fmt.Sprintf("%d events", n)
	default:
		return fmt.Errorf("unknown fault %s", k)
	}
	r.sum.Faults[string(k)]++
	r.logf("injected %s %s", k, detail)
	return nil
}

// duplicateEvents copies up to dupBatch random events among the last dupWindow of the broker's
// stream and publishes them again in shuffled order, with their CloudEvent (same id, same data)
// unchanged but a new Nats-Msg-Id, so JetStream's de-duplication lets them through and the triggers
// deliver each event a second time, out of order. It returns how many were published.
func (r *run) duplicateEvents(ctx context.Context) (int, error) {
	nc, js, err := r.jetStream()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, r.cfg.NATSStream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	first, last := info.State.FirstSeq, info.State.LastSeq
	if last == 0 || last < first {
		return 0, fmt.Errorf("stream %s is empty", r.cfg.NATSStream)
	}
	lo := first
	if last >= dupWindow && last-dupWindow+1 > lo {
		lo = last - dupWindow + 1
	}
	var msgs []*jetstream.RawStreamMsg
	seen := map[uint64]bool{}
	for tries := 0; len(msgs) < dupBatch && tries < 3*dupBatch; tries++ {
		seq := lo + uint64(r.rng.Int64N(int64(last-lo+1)))
		if seen[seq] {
			continue
		}
		seen[seq] = true
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted or never stored
		}
		msgs = append(msgs, m)
	}
	r.rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	n := 0
	for _, m := range msgs {
		out := nats.NewMsg(m.Subject)
		out.Data = m.Data
		for k, v := range m.Header {
			if k != jetstream.MsgIDHeader {
				out.Header[k] = v
			}
		}
		id := fmt.Sprintf("chaos-%s-%d-%d", r.id, m.Sequence, r.sum.EventsRepublished+n)
		if _, err := js.PublishMsg(ctx, out, jetstream.WithMsgID(id), jetstream.WithExpectStream(r.cfg.NATSStream)); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("no event could be read from the stream")
	}
	return n, nil
}
