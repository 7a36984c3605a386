//go:build race

package main

// raceEnabled: the test binary was built with -race, so binaries it builds are too (sharing the
// build cache of its dependencies).
const raceEnabled = true
