//go:build !unix

package testenv

import "testing"

// S3Server is a running S3-compatible server; see the unix version of [S3].
type S3Server struct {
	Endpoint, Region, AccessKey, SecretKey, Bucket string
}

// S3 fails the test: the versitygw server is only started on unix systems.
func S3(t testing.TB) *S3Server {
	t.Helper()
	t.Fatal("testenv.S3 starts versitygw, which is only supported on unix systems")
	return nil
}

// NewBucket is never reached (S3 fails first).
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	t.Fatal("testenv.S3 is only supported on unix systems")
	return ""
}

// Stop is never reached (S3 fails first).
func (s *S3Server) Stop(t testing.TB) {
	t.Helper()
	t.Fatal("testenv.S3 is only supported on unix systems")
}

// Start is never reached (S3 fails first).
func (s *S3Server) Start(t testing.TB) {
	t.Helper()
	t.Fatal("testenv.S3 is only supported on unix systems")
}

// ObjectPath is never reached (S3 fails first).
func (s *S3Server) ObjectPath(key string) string { return "" }
