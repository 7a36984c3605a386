package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// orderCreateSQL is the pgbench script of order-create's transaction: the ride INSERT (with its
// RETURNING) and the ride.requested outbox row, in one transaction pipelined in one round trip, as
// pgstore.CreateRide sends them.
//
//go:embed ordercreate.sql
var orderCreateSQL string

// redisBenchmarkGEOADD runs redis-benchmark's GEOADD into key: n requests (one GEOADD of one
// member each) with pipeline depth pipeline over clients connections; it returns requests/s.
func redisBenchmarkGEOADD(ctx context.Context, bin string, opt *redis.Options, key string, clients, pipeline, n int) (float64, error) {
	host, port, _ := strings.Cut(opt.Addr, ":")
	args := []string{"-h", host, "-p", port, "-n", strconv.Itoa(n), "-c", strconv.Itoa(clients),
		"-P", strconv.Itoa(pipeline), "-r", "1000000", "--csv", "--dbnum", strconv.Itoa(opt.DB)}
	if opt.Username != "" {
		args = append(args, "--user", opt.Username)
	}
	if opt.Password != "" {
		args = append(args, "-a", opt.Password)
	}
	args = append(args, "GEOADD", key, "-73.98", "40.75", "m:__rand_int__")
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", bin, err, out)
	}
	return parseRedisBenchmarkCSV(out)
}

// parseRedisBenchmarkCSV returns the rps column of redis-benchmark --csv output.
func parseRedisBenchmarkCSV(out []byte) (float64, error) {
	var lines [][]byte
	for _, l := range bytes.Split(out, []byte("\n")) {
		if bytes.HasPrefix(l, []byte(`"`)) {
			lines = append(lines, l)
		}
	}
	recs, err := csv.NewReader(bytes.NewReader(bytes.Join(lines, []byte("\n")))).ReadAll()
	if err != nil || len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" {
		return 0, fmt.Errorf("redis-benchmark: unexpected output %q", out)
	}
	return strconv.ParseFloat(recs[len(recs)-1][1], 64)
}

var tpsRe = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// pgbenchOrderCreate runs pgbench with orderCreateSQL in schema for dur with clients connections
// (prepared statements, like pgx's statement cache) and returns transactions per second.
func pgbenchOrderCreate(ctx context.Context, bin, databaseURL, schema string, clients int, dur time.Duration) (float64, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "flagdown-bench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "ordercreate.sql")
	if err := os.WriteFile(script, []byte(orderCreateSQL), 0o600); err != nil {
		return 0, err
	}
	secs := max(1, int(math.Round(dur.Seconds())))
	// pgbench takes a connection string as its database name; search_path goes in PGOPTIONS.
	q := u.Query()
	q.Del("pool_max_conns") // pgx's, not libpq's
	u.RawQuery = q.Encode()
	cmd := exec.CommandContext(ctx, bin, "-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-j", "2",
		"-T", strconv.Itoa(secs), "-f", script, u.String())
	cmd.Env = append(os.Environ(), "PGOPTIONS=-c search_path="+schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v: %s", bin, err, out)
	}
	m := tpsRe.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in %q", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// loadAvg returns the 1, 5 and 15 minute load averages of /proc/loadavg ("?" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// quantile returns the q-quantile (0..1, nearest rank) of ms, sorting it in place; NaN when empty.
func quantile(ms []float64, q float64) float64 {
	if len(ms) == 0 {
		return math.NaN()
	}
	slices.Sort(ms)
	rank := int(math.Ceil(q * float64(len(ms))))
	return ms[max(1, min(rank, len(ms)))-1]
}

func durMs(d time.Duration) float64 { return float64(d) / 1e6 }

// median returns the median of v (NaN when empty), without changing v.
func median(v []float64) float64 {
	return quantile(slices.Clone(v), 0.5)
}
