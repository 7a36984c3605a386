package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/host"
	"github.com/flagdown/flagdown/shared/internalauth"
)

// maxDeadLetterBytes caps the body of a dead letter the sink reads (it reads it only to parse the
// attributes of a structured event; it never logs it).
const maxDeadLetterBytes = 1 << 20

// deadLetterAttributes are the CloudEvent extension attributes a dead letter's log line carries
// besides the core attributes: the signing key's id and what Knative says about the failed
// delivery. Never the signature, never knativeerrordata (the subscriber's answer, which may
// quote the event), never the data.
var deadLetterAttributes = []string{internalauth.KeyIDExtension, "knativeerrorcode", "knativeerrordest"}

// deadLetterHandler is the dead-letter sink: it accepts a CloudEvent (binary or structured mode)
// that a trigger could not deliver, logs at warn what identifies it (id, type, source, subject,
// time, the size of its data, deadLetterAttributes) and answers 202. The event's data (rider ids,
// positions) and its signature are never logged: the log is read by more people than the
// broker. A request that is not a CloudEvent answers 400 and is logged without its body.
func deadLetterHandler(log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "POST a CloudEvent", http.StatusMethodNotAllowed)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxDeadLetterBytes)
		e, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			log.Warn("dead letter: not a CloudEvent; dropped", "content_type", r.Header.Get("Content-Type"), "bytes", r.ContentLength)
			http.Error(w, "not a CloudEvent", http.StatusBadRequest)
			return
		}
		attrs := []any{"id", e.ID(), "type", e.Type(), "source", e.Source(), "subject", e.Subject(),
			"time", e.Time().UTC().Format(time.RFC3339Nano), "data_bytes", len(e.Data())}
		ext := e.Extensions()
		for _, k := range deadLetterAttributes {
			if v, ok := ext[k]; ok {
				attrs = append(attrs, k, fmt.Sprint(v))
			}
		}
		log.Warn("dead letter", attrs...)
		w.WriteHeader(http.StatusAccepted)
	})
}

func newDeadLettersCmd() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "dead-letters",
		Short: "Serve the Knative dead-letter sink: log what identifies each undeliverable event, never its data",
		Long: `Serves POST / on --addr (default :$PORT, else :8080): every event a Knative Trigger could not deliver
after its retries, in CloudEvents binary or structured mode. Each is logged at warn ("dead letter")
with its id, type, source, subject, time, the size of its data, its signing key id and Knative's
knativeerrorcode and knativeerrordest; never its data (rider ids, positions), its signature or the
subscriber's answer. Answers 202. deploy/knative/broker.yaml runs it as the cluster-local Service
flagdown-dead-letters. reconcile repairs whatever a dead-lettered event would have done.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, _ := config.Load() // only the log settings; a partial configuration is fine here
			log := host.NewLogger(cfg)
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("dead-letters: listen on %s: %w", addr, err)
			}
			srv := &http.Server{Handler: deadLetterHandler(log), ReadHeaderTimeout: 5 * time.Second,
				ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
				MaxHeaderBytes: 64 << 10}
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			log.Info("dead-letter sink listening", "addr", ln.Addr().String())
			select {
			case err := <-errc:
				if !errors.Is(err, http.ErrServerClosed) {
					return err
				}
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		},
	}
	def := ":8080"
	if p := os.Getenv("PORT"); p != "" {
		def = ":" + p
	}
	cmd.Flags().StringVar(&addr, "addr", def, "listen address (Knative sets PORT)")
	return cmd
}
