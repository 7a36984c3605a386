package main

import "github.com/spf13/cobra"

// newReplayCmd is filled in by the replay work.
func newReplayCmd() *cobra.Command {
	return &cobra.Command{Use: "replay", Short: "replay real trips against a running platform"}
}
