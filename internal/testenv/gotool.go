//go:build unix

package testenv

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// goTool is a program tests run, built from a pinned module version with `go install`: the
// versitygw S3 server, grpcurl.
type goTool struct {
	name    string        // the binary's name: "versitygw"
	pkg     string        // the package to install: "github.com/versity/versitygw/cmd/versitygw"
	module  string        // its module, checked in the binary's build information
	version string        // the pinned version; the Makefile pins the same one
	env     string        // the variable naming a prebuilt binary: "SLUICE_TEST_VERSITYGW"
	timeout time.Duration // bounds the build
}

// find returns the path of a binary of g built from g.version, in this order:
//
//  1. $<g.env>, the path of such a binary (`make test` builds bin/<name>-<version> and sets it);
//     one of another module or version is an error naming the variable.
//  2. Cached under $XDG_CACHE_HOME/sluice-testenv/<name>-<version> (or ~/.cache/…) by an earlier
//     run.
//  3. Built there, once per machine, with `go install <pkg>@<version>`, under a file lock so that
//     test binaries running in parallel build it once.
func (g goTool) find() (string, error) {
	if p := os.Getenv(g.env); p != "" {
		if err := g.check(p); err != nil {
			return "", fmt.Errorf("testenv: %s=%s: %w", g.env, p, err)
		}
		return p, nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testenv: no cache directory to build %s in (%v): set %s to a %s %s binary",
			g.name, err, g.env, g.name, g.version)
	}
	dir := filepath.Join(cache, "sluice-testenv", g.name+"-"+g.version)
	bin := filepath.Join(dir, g.name)
	if g.check(bin) == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"), syscall.LOCK_EX)
	if err != nil {
		return "", fmt.Errorf("testenv: lock the %s build: %w", g.name, err)
	}
	defer unlock()
	if g.check(bin) == nil { // built by another test binary while we waited
		return bin, nil
	}
	if err := g.install(dir, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// check checks that path is a binary of g.module built from g.version.
func (g goTool) check(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	if bi.Main.Path != g.module || bi.Main.Version != g.version {
		return fmt.Errorf("built from %s %s, want %s %s", bi.Main.Path, bi.Main.Version, g.module, g.version)
	}
	return nil
}

// install runs go install into a staging directory under dir and moves the binary to bin.
func (g goTool) install(dir, bin string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("testenv: %s is not built and there is no go command to build it (%v): "+
			"run `make test`, or set %s to a %s %s binary", g.name, err, g.env, g.name, g.version)
	}
	staging, err := os.MkdirTemp(dir, ".staging-")
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer os.RemoveAll(staging)
	ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "install", g.pkg+"@"+g.version)
	cmd.Dir = staging // outside any module or workspace
	cmd.Env = append(os.Environ(), "GOBIN="+staging, "GOWORK=off", "GOFLAGS=-buildvcs=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("testenv: go install %s@%s failed (%v); set %s to a %s binary to skip the build:\n%s",
			g.pkg, g.version, err, g.env, g.name, tail(string(out)))
	}
	if err := os.Rename(filepath.Join(staging, g.name), bin); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	return g.check(bin)
}
