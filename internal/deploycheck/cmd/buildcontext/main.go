// Command buildcontext lays out, for each function of stack.yml, the build context faas-cli would
// create (build/<function>/, like faas-cli build --shrinkwrap) and builds it with the template's own
// build step, offline from the module cache. It is what `make build-context` runs
// (scripts/buildcontext.sh); run it from the repository root.
//
//	go run ./internal/deploycheck/cmd/buildcontext [-f stack.yml] [-o build] [function ...]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/flagdown/flagdown/internal/deploycheck"
)

func main() {
	stackFile := flag.String("f", "stack.yml", "stack file; its folder is the project root")
	outDir := flag.String("o", "build", "folder the build contexts are written to (build/<function>)")
	offline := flag.Bool("offline", true, "build with GOPROXY=off from the module cache")
	flag.Parse()

	s, err := deploycheck.LoadStack(*stackFile)
	if err != nil {
		fail(err)
	}
	root := filepath.Dir(*stackFile)
	names := flag.Args()
	if len(names) == 0 {
		for n := range s.Functions {
			names = append(names, n)
		}
		sort.Strings(names)
	}
	out, err := filepath.Abs(*outDir)
	if err != nil {
		fail(err)
	}
	var env []string
	if *offline {
		env = deploycheck.OfflineEnv
	}
	for _, n := range names {
		dir := filepath.Join(out, n)
		if err := deploycheck.Layout(root, s, n, dir); err != nil {
			fail(err)
		}
		bin := filepath.Join(dir, "handler")
		if err := deploycheck.Build(dir, bin, env, os.Stdout, os.Stderr); err != nil {
			fail(fmt.Errorf("%s: %w", n, err))
		}
		fmt.Printf("buildcontext: %-20s %s -> %s\n", n, dir, bin)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "buildcontext:", err)
	os.Exit(1)
}
