// Package e2e holds end-to-end tests that build the real sluice binary and
// run it as separate processes on loopback ports, the way a user would.
package e2e
