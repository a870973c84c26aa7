//go:build unix

package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestGrpcurlRefusesAnotherVersion(t *testing.T) {
	// Not parallel: it sets the environment.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := grpcurl.check(self); err == nil || !strings.Contains(err.Error(), grpcurl.module) {
		t.Fatalf("check(test binary) = %v, want an error naming %s", err, grpcurl.module)
	}
	t.Setenv(EnvGrpcurl, self)
	if _, err := grpcurl.find(); err == nil || !strings.Contains(err.Error(), EnvGrpcurl) {
		t.Fatalf("find with %s=<test binary> = %v, want an error naming the variable", EnvGrpcurl, err)
	}
	t.Setenv(EnvGrpcurl, "/nonexistent/grpcurl")
	if _, err := grpcurl.find(); err == nil {
		t.Fatal("a missing binary was accepted")
	}
}

// TestGrpcurlRuns: the binary Grpcurl returns (from $SLUICE_TEST_GRPCURL, the cache, or a build)
// is the pinned grpcurl and runs.
func TestGrpcurlRuns(t *testing.T) {
	bin := Grpcurl(t)
	if err := grpcurl.check(bin); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "-help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-plaintext") {
		t.Fatalf("%s -help: %v\n%s", bin, err, out)
	}
}
