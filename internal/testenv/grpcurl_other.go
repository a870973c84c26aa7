//go:build !unix

package testenv

import "testing"

// Grpcurl fails the test: building and finding grpcurl is only supported on unix systems.
func Grpcurl(t testing.TB) string {
	t.Helper()
	t.Fatal("testenv.Grpcurl is only supported on unix systems")
	return ""
}
