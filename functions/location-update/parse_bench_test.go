package function

// Micro-benchmarks of a location-update call's decoding and validation (no I/O), run by
// `make bench` with -benchmem:
//
//	go test -run '^$' -bench . -benchmem ./functions/location-update/

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flagdown/flagdown/shared/app"
	"github.com/flagdown/flagdown/shared/auth"
	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
)

func benchFunction(b *testing.B) *Function {
	cfg, err := config.FromEnv(map[string]string{})
	if err != nil {
		b.Fatal(err)
	}
	return &Function{d: app.With(&host.Deps{Config: cfg}), now: time.Now}
}

func benchBatch(n int) json.RawMessage {
	ts := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	pings := make([]string, n)
	for i := range pings {
		pings[i] = fmt.Sprintf(`{"driver_id":"d-%d","lat":40.75%04d,"lng":-73.98%04d,"ts":%q,"status":"available"}`, i, i, i, ts)
	}
	if n == 1 {
		return json.RawMessage(pings[0])
	}
	return json.RawMessage(`{"pings":[` + strings.Join(pings, ",") + `]}`)
}

// BenchmarkParseValidatePings decodes and validates a call of 1 or 500 pings (service token): the
// per-ping CPU of the handler before Redis. ns/op is per call.
func BenchmarkParseValidatePings(b *testing.B) {
	f := benchFunction(b)
	id := auth.Identity{Subject: "aggregator", Role: auth.RoleService}
	for _, n := range []int{1, 500} {
		raw := benchBatch(n)
		b.Run(fmt.Sprintf("pings=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				single, reqs, err := f.parse(raw)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := f.validate(reqs, single, id); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
