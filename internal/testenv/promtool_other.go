//go:build !unix

package testenv

import "testing"

// Promtool fails the test: finding and installing promtool is only supported on unix systems.
func Promtool(t testing.TB) string {
	t.Helper()
	t.Fatal("testenv.Promtool is only supported on unix systems")
	return ""
}
