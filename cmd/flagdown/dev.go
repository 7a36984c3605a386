package main

import "github.com/spf13/cobra"

func newDevCmd() *cobra.Command {
	return &cobra.Command{Use: "dev", Short: "run the local platform"}
}

func newMigrateCmd() *cobra.Command {
	return &cobra.Command{Use: "migrate", Short: "apply database migrations"}
}
