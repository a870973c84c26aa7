//go:build unix

package testenv

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestPromtoolRuns(t *testing.T) {
	t.Parallel()
	bin := Promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check", "rules", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s check rules --help: %v\n%s", bin, err, out)
	}
}

func TestPromtoolFromEnv(t *testing.T) {
	// Not parallel: it sets the environment. echo stands in for a promtool that runs, false for
	// one that does not.
	echo, err := exec.LookPath("echo")
	if err != nil {
		t.Fatal(err)
	}
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPromtool, echo)
	if p, _, err := findOrInstallPromtool(); err != nil || p != echo {
		t.Fatalf("findOrInstallPromtool with %s=%s = %q, %v; want %[2]s", EnvPromtool, echo, p, err)
	}
	for _, bad := range []string{falseBin, "/nonexistent/promtool"} {
		t.Setenv(EnvPromtool, bad)
		if _, _, err := findOrInstallPromtool(); err == nil || !strings.Contains(err.Error(), EnvPromtool) {
			t.Fatalf("findOrInstallPromtool with %s=%s = %v, want an error naming the variable", EnvPromtool, bad, err)
		}
	}
}
