package main

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
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
