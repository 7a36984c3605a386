package outbox_test

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"

	"github.com/flagdown/flagdown/events"
	"github.com/flagdown/flagdown/internal/testkit"
	"github.com/flagdown/flagdown/shared/outbox"
	"github.com/flagdown/flagdown/shared/pgstore"
)

// BenchmarkCommitToPublish measures the time from the commit of a transaction that wrote one
// outbox row to the relay's publish call for it, ms (p50, p99, max), with the default poll (waits of
// 2 ms doubling up to 50 ms). Rows arrive one at a time after a pseudo-random pause of 0–120 ms, so
// the relay is caught at every stage of its idle waits. "poll": the writer is another process (only
// the poll finds the row); "wake": the writer is in the relay's process (pgstore.DB.OnOutboxCommit).
//
//	go test -run '^$' -bench CommitToPublish -benchtime 400x ./shared/outbox/
func BenchmarkCommitToPublish(b *testing.B) {
	for _, mode := range []string{"poll", "wake"} {
		b.Run(mode, func(b *testing.B) {
			db := testkit.DB(b)
			published := make(chan time.Time, 1)
			r := outbox.New(db, func(context.Context, event.Event) error {
				published <- time.Now()
				return nil
			}, outbox.Options{Log: slog.New(slog.DiscardHandler)})
			if mode == "wake" {
				db.OnOutboxCommit(r.Wake)
			}
			testkit.Run(b, r.Run)
			rng := rand.New(rand.NewPCG(1, 2))
			ctx := context.Background()
			lat := make([]float64, 0, b.N)
			pause := time.NewTimer(0)
			defer pause.Stop()
			b.ResetTimer()
			for i := range b.N {
				<-pause.C
				err := db.Tx(ctx, func(tx pgx.Tx) error {
					_, err := pgstore.InsertOutbox(ctx, tx, pgstore.OutboxEvent{Type: events.RideRequested,
						Source: "/flagdown/bench", Subject: "ride-bench", Data: payload{Key: "ride-bench", N: i}})
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
				committed := time.Now()
				lat = append(lat, float64((<-published).Sub(committed))/1e6)
				pause.Reset(time.Duration(rng.Int64N(int64(120 * time.Millisecond))))
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return lat[max(0, int(math.Ceil(p*float64(len(lat))))-1)] }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}
