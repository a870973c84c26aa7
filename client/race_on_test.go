//go:build race

package client_test

// raceEnabled: the race detector slows the in-process cluster several
// times over, so load-driven tests scale their rates down.
const raceEnabled = true
