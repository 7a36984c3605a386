package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/invariants"
	"github.com/flagdown/flagdown/shared/logging"
)

// notifyWithin is how long flagdown gets to apply notify-keyspace-events after Redis (re)started
// without it: the expiry source's health mark sees the new generation at its next sweep (200 ms by
// default) and re-applies it; a busy host under the race build is given 15 s.
const notifyWithin = 15 * time.Second

// checkConfig is the configuration the invariant checks read: the platform's, with the run's
// broker (so the dead-letter and consumer-lag invariants are judged on its streams).
func (r *run) checkConfig() *config.Config {
	cfg := *r.cfg
	cfg.NATSURL = fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort)
	return &cfg
}

// checkNotifications waits until Redis publishes expired events again (flagdown applied
// notify-keyspace-events) and counts it in the summary; it returns a word for the fault's log line.
func (r *run) checkNotifications(ctx context.Context, after string) string {
	start := time.Now()
	var ok bool
	for {
		// A restart slower than the Sentinel's down-after is failed over while it runs, and the
		// restarted server comes back as a replica: flagdown configures the primary it uses, so
		// the check follows the Sentinel's primary (without a Sentinel: the one server).
		_, _ = r.followPrimary(ctx)
		if ok = r.redis.notificationsOn(ctx); ok || time.Since(start) > notifyWithin || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	took := time.Since(start)
	if !ok {
		r.sum.NotifyNotReapplied++
		r.logf("notify-keyspace-events NOT re-applied within %s after %s", notifyWithin, after)
		return "notify-keyspace-events NOT re-applied"
	}
	r.sum.NotifyReapplied++
	return fmt.Sprintf("notify-keyspace-events re-applied in %s", took.Round(time.Millisecond))
}

// monitor checks the invariants every InvariantEvery while the run goes on (invariants.Check with
// Grace, from its own connections), and records per invariant the largest count a round found. A
// round is skipped while an outage is under way and for Grace after it (Redis or the platform was
// away: what they hold is being rebuilt, which Grace already allows for once they are back) and
// when the check cannot reach the stores. It returns the function that stops it.
func (r *run) monitor(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var d *app.Deps
		defer func() {
			if d != nil {
				d.Close()
			}
		}()
		t := time.NewTicker(r.opts.InvariantEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if r.inOutage(r.opts.Grace) {
				r.during(func(s *Summary) { s.DuringRoundsSkipped++ })
				continue
			}
			if d == nil {
				octx, c := context.WithTimeout(ctx, 10*time.Second)
				var err error
				d, err = app.Open(octx, r.cfg, logging.Discard())
				c()
				if err != nil {
					d = nil
					r.during(func(s *Summary) { s.DuringRoundsSkipped++ })
					continue
				}
			}
			cctx, c := context.WithTimeout(ctx, 30*time.Second)
			rep, err := invariants.CheckDeployment(cctx, r.checkConfig(), d.DB, d.Redis, r.opts.Grace)
			c()
			if err != nil || r.inOutage(0) {
				// Unreadable, or an outage began meanwhile: the round proves nothing.
				r.during(func(s *Summary) { s.DuringRoundsSkipped++ })
				continue
			}
			r.during(func(s *Summary) {
				s.DuringRounds++
				for _, res := range rep.Results {
					if slices.Contains(rep.NotChecked, res.Name) {
						continue // the broker was not reachable this round: no count, not a 0
					}
					if res.Count > s.DuringInvariants[res.Name.Key()] {
						s.DuringInvariants[res.Name.Key()] = res.Count
						s.DuringExamples[string(res.Name)] = res.Examples
					}
					if _, ok := s.DuringInvariants[res.Name.Key()]; !ok {
						s.DuringInvariants[res.Name.Key()] = 0
					}
				}
			})
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// during changes the summary's during-run figures under the run's lock.
func (r *run) during(f func(*Summary)) {
	r.outagesMu.Lock()
	defer r.outagesMu.Unlock()
	f(r.sum)
}

// scrapeRepairs reads flagdown_reconcile_repairs_total of the running platform (GET /metrics of
// the gateway) into repairsLast; a platform that does not answer keeps the last scrape.
func (r *run) scrapeRepairs(ctx context.Context) {
	r.lastScrape = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.gatewayAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	const name = `flagdown_reconcile_repairs_total{kind="`
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		kind, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			got[kind] = v
		}
	}
	if sc.Err() == nil {
		r.repairsLast = got
	}
}

// repairs is the reconcile repairs of the whole run, per kind.
func (r *run) repairs() map[string]int {
	out := map[string]int{}
	for k, v := range r.repairsBase {
		out[k] += int(v)
	}
	for k, v := range r.repairsLast {
		out[k] += int(v)
	}
	return out
}

// jetStream connects to the run's broker; the caller closes nc.
func (r *run) jetStream() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort), nats.Name("flagdown-chaos"), nats.Timeout(3*time.Second))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// deadLetters counts the messages of the broker's dead-letter stream (<stream>_DLQ).
func (r *run) deadLetters(ctx context.Context) (int, error) {
	nc, js, err := r.jetStream()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, r.cfg.NATSStream+"_DLQ")
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}
