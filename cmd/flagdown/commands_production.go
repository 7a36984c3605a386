//go:build production

package main

import "github.com/spf13/cobra"

// devCommands is empty in a production build (-tags production): its image carries the production
// daemons and tools only (migrate, relay, expiry-source, cron, verify, keygen).
func devCommands() []*cobra.Command { return nil }
