//go:build unix

package testenv

import (
	"sync"
	"testing"
	"time"
)

var grpcurl = goTool{
	name: "grpcurl", pkg: "github.com/fullstorydev/grpcurl/cmd/grpcurl", module: "github.com/fullstorydev/grpcurl",
	version: GrpcurlVersion, env: EnvGrpcurl, timeout: 10 * time.Minute,
}

var (
	grpcurlOnce sync.Once
	grpcurlPath string
	grpcurlErr  error
)

// Grpcurl returns the path of a grpcurl binary (https://github.com/fullstorydev/grpcurl), the
// command-line gRPC client a user without Sluice's SDK reaches for, built from GrpcurlVersion. It
// is, in this order:
//
//  1. $SLUICE_TEST_GRPCURL, the path of a grpcurl binary (`make test` builds bin/grpcurl-<version>
//     first and sets it).
//  2. Cached under $XDG_CACHE_HOME/sluice-testenv (or ~/.cache/sluice-testenv) by an earlier run.
//  3. Built there, once per machine, with `go install
//     github.com/fullstorydev/grpcurl/cmd/grpcurl@<GrpcurlVersion>` (about a minute), under a file
//     lock so that test binaries running in parallel build it once.
//
// The binary must have been built from GrpcurlVersion (read from its build information). When none
// can be had the test fails (t.Fatal) with the reason and the build output; it never skips.
func Grpcurl(t testing.TB) string {
	t.Helper()
	start := time.Now()
	grpcurlOnce.Do(func() { grpcurlPath, grpcurlErr = grpcurl.find() })
	if grpcurlErr != nil {
		t.Fatal(grpcurlErr)
	}
	if built := time.Since(start); built > 5*time.Second {
		t.Logf("testenv: built grpcurl %s in %s", GrpcurlVersion, built.Round(time.Second))
	}
	return grpcurlPath
}
