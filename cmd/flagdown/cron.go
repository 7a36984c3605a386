package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

func newCronCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "Call an internal endpoint once with the internal token (the reconcile CronJob)",
		Long: `POSTs an empty body to --url with Authorization: Bearer <FLAGDOWN_INTERNAL_TOKEN> (env, or the
secret file flagdown-internal-token; the first token during a rotation), prints the answer and
exits with status 1 unless it is 2xx. The CronJob flagdown-reconcile-cron of deploy/openfaas and
deploy/knative runs it every minute against reconcile: neither the OpenFaaS cron-connector nor a
Knative PingSource can send a credential from a Secret.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			keys, err := internalTokens(cfg)
			if err != nil {
				return err
			}
			status, body, err := callInternal(cmd.Context(), &http.Client{Timeout: timeout}, url, keys)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stdout, "%d %s\n", status, body)
			if status/100 != 2 {
				return fmt.Errorf("%s answered %d", url, status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/function/reconcile", "endpoint to POST to")
	cmd.Flags().DurationVar(&timeout, "timeout", 55*time.Second, "bound of the call")
	return cmd
}

// cron calls url with POST every interval until ctx ends, like the flagdown-reconcile-cron CronJob
// of a cluster (`flagdown cron`), with the internal token of keys (Authorization: Bearer);
// failures are logged and the next tick tries again.
func cron(ctx context.Context, url string, interval time.Duration, keys *internalauth.Tokens, log *slog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		status, body, err := callInternal(ctx, http.DefaultClient, url, keys)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("cron call failed", "url", url, "err", err)
		case err == nil && status/100 != 2:
			log.Error("cron call failed", "url", url, "status", status, "body", string(body))
		}
	}
}

// callInternal POSTs an empty body to url with the internal token of keys and returns the
// status and the first 4 KiB of the answer.
func callInternal(ctx context.Context, hc *http.Client, url string, keys *internalauth.Tokens) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := keys.SetBearer(req); err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, body, nil
}
