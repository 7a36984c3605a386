//go:build !production

package main

import "github.com/spf13/cobra"

// devCommands are the tools around the function set that production images leave out (built with
// -tags production, see deploy/docker/Dockerfile): the local platform, the replay, chaos, bench and
// client tokens for local use.
func devCommands() []*cobra.Command {
	return []*cobra.Command{newDevCmd(), newReplayCmd(), newChaosCmd(), newTokenCmd(), newBenchCmd()}
}
