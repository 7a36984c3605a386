package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/flagdown/flagdown/shared/logging"
)

func TestNewJSONByDefault(t *testing.T) {
	for _, format := range []string{"", logging.FormatJSON} {
		var buf bytes.Buffer
		log, err := logging.New(&buf, format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("offer expired", logging.RideID("r-1"), logging.DriverID("d-1"), "attempt", 2)
		log.Debug("not at info")
		lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
		if len(lines) != 1 {
			t.Fatalf("format %q: %d lines %q; want the one info line", format, len(lines), buf.String())
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &got); err != nil {
			t.Fatalf("format %q: line %q is not JSON: %v", format, lines[0], err)
		}
		if got["msg"] != "offer expired" || got["level"] != "INFO" || got["ride_id"] != "r-1" || got["driver_id"] != "d-1" || got["attempt"] != 2.0 || got["time"] == nil {
			t.Errorf("format %q: got %v", format, got)
		}
	}
}

func TestNewTextAndLevel(t *testing.T) {
	var buf bytes.Buffer
	log, err := logging.New(&buf, logging.FormatText, slog.LevelDebug)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("sweep", logging.DriverID("d-7"))
	if got := buf.String(); !strings.Contains(got, "level=DEBUG msg=sweep driver_id=d-7") || strings.HasPrefix(got, "{") {
		t.Errorf("text line %q; want slog's key=value with driver_id", got)
	}
	buf.Reset()
	log, _ = logging.New(&buf, logging.FormatJSON, slog.LevelWarn)
	log.Info("dropped")
	log.Warn("kept")
	if got := buf.String(); strings.Contains(got, "dropped") || !strings.Contains(got, `"msg":"kept"`) {
		t.Errorf("at warn: %q; want only the warning", got)
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := logging.New(&bytes.Buffer{}, "logfmt", slog.LevelInfo); err == nil {
		t.Error("New accepted format logfmt")
	}
	if err := logging.CheckFormat("JSON"); err == nil {
		t.Error("CheckFormat accepted JSON (formats are lower case)")
	}
}

func TestEventSubject(t *testing.T) {
	for _, c := range []struct{ typ, subject, key string }{
		{"io.flagdown.ride.offered.v1", "r-1", "ride_id"},
		{"io.flagdown.ride.driver.offline.v1", "r-2", "ride_id"},
		{"io.flagdown.driver.status.changed.v1", "d-1", "driver_id"},
		{"io.flagdown.redis.key.expired.v1", "flagdown:hb:d-1", "subject"},
	} {
		if a := logging.EventSubject(c.typ, c.subject); a.Key != c.key || a.Value.String() != c.subject {
			t.Errorf("EventSubject(%s, %s) = %v; want %s=%s", c.typ, c.subject, a, c.key, c.subject)
		}
	}
}
