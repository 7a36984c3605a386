package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/flagdown/flagdown/shared/config"
	"github.com/flagdown/flagdown/shared/internalauth"
)

func newKeygenCmd() *cobra.Command {
	var kid, dir string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Generate an event signing key pair and an internal token (secret files, mode 0600)",
		Long: `Generates a new Ed25519 event signing key named --kid (default: today's date) and a random
internal token, and writes them as secret files under --dir: flagdown-event-signing-key (the
private key: give it to the outbox relay and the expiry source only), flagdown-event-verify-keys
(the public key: give it to the event-triggered functions) and flagdown-internal-token (the bearer
token of the reconcile cron and the gateway's integrations). Files are created with mode 0600 and
never overwritten. Nothing secret is printed. To rotate, see docs/security.md: add the new public
key to every function's flagdown-event-verify-keys first, then switch the publishers' signing key,
then drop the old public key after the maximum event age.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := internalauth.GenerateSigner(kid)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			for v, value := range map[string]string{
				internalauth.SigningKeyVariable: s.Secret(),
				internalauth.VerifyKeysVariable: s.VerifyKey(),
				internalauth.TokenVariable:      internalauth.GenerateToken(),
			} {
				path := filepath.Join(dir, config.SecretFileName(v))
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
				if err != nil {
					return fmt.Errorf("keygen: %w (a file is never overwritten)", err)
				}
				_, werr := fmt.Fprintln(f, value)
				if err := f.Close(); werr == nil {
					werr = err
				}
				if werr != nil {
					return werr
				}
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", path)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "key id", s.KeyID())
			return nil
		},
	}
	cmd.Flags().StringVar(&kid, "kid", time.Now().UTC().Format("2006-01-02"), "key id of the new signing key (letters, digits, '.', '_', '-')")
	cmd.Flags().StringVar(&dir, "dir", ".", "directory the secret files are written to")
	return cmd
}
