//go:build unix

package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// EnvPromtool names the environment variable that points [Promtool] at a promtool binary instead of
// the one found on PATH or installed.
const EnvPromtool = "SLUICE_TEST_PROMTOOL"

var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// Promtool returns the path of a working promtool, Prometheus's rule checker, for tests of the
// alerting rules in infra/prometheus. It is found once per test binary, in this order:
//
//  1. $SLUICE_TEST_PROMTOOL, the path of a promtool binary.
//  2. promtool on $PATH, then in /usr/bin, /usr/local/bin, /opt/prometheus*, $GOBIN, $GOPATH/bin
//     and ~/go/bin.
//  3. When none is found and the process runs as root, `apt-get install -y
//     --no-install-recommends prometheus` is tried once (after `apt-get update` if the first try
//     fails), under the same file lock as the PostgreSQL install so that test binaries running in
//     parallel install once and never run apt-get at the same time. The Debian package (about
//     20 MB; it takes seconds) puts promtool in /usr/bin; on a host running systemd it also
//     enables and starts the prometheus service, as installing it by hand would.
//
// The binary must answer `promtool --version`. When no promtool can be had the test fails
// (t.Fatal) with the reason and what to install; it never skips.
func Promtool(t testing.TB) string {
	t.Helper()
	promtoolOnce.Do(func() {
		var note string
		promtoolPath, note, promtoolErr = findOrInstallPromtool()
		if note != "" {
			t.Log(note) // in the test that caused the install
		}
	})
	if promtoolErr != nil {
		t.Fatal(promtoolErr)
	}
	return promtoolPath
}

// findOrInstallPromtool finds promtool, installing it when missing, and checks that it runs. The
// note says what was installed, for the log.
func findOrInstallPromtool() (path, note string, err error) {
	if p := os.Getenv(EnvPromtool); p != "" {
		if _, err := checkPromtool(p); err != nil {
			return "", "", fmt.Errorf("testenv: %s=%s: %w", EnvPromtool, p, err)
		}
		return p, "", nil
	}
	if p := findPromtool(); p != "" {
		if _, err := checkPromtool(p); err != nil {
			return "", "", fmt.Errorf("testenv: %s: %w", p, err)
		}
		return p, "", nil
	}
	start := time.Now()
	why := installPromtool()
	p := findPromtool()
	if p == "" {
		if why == "" {
			why = "apt-get install -y prometheus succeeded but no promtool was found afterwards"
		}
		return "", "", fmt.Errorf("testenv: no promtool for the Prometheus rule tests: none on PATH or in %s; %s.\n"+
			"Install the Debian package prometheus (apt-get install prometheus), put promtool on PATH, or set %s "+
			"to a promtool binary", strings.Join(promtoolDirs(), ", "), why, EnvPromtool)
	}
	v, err := checkPromtool(p)
	if err != nil {
		return "", "", fmt.Errorf("testenv: %s (just installed): %w", p, err)
	}
	return p, fmt.Sprintf("testenv: installed %s at %s (Debian package prometheus) in %s", v, p,
		time.Since(start).Round(100*time.Millisecond)), nil
}

// findPromtool returns the first executable promtool on PATH or in promtoolDirs, or "".
func findPromtool() string {
	if p, err := exec.LookPath("promtool"); err == nil {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	for _, d := range promtoolDirs() {
		if p := filepath.Join(d, "promtool"); isExecutable(p) {
			return p
		}
	}
	return ""
}

// promtoolDirs are the directories searched for promtool beside PATH: the distributions' and
// administrators' usual places, unpacked release tarballs under /opt (prometheus-<version>.<os>-
// <arch>, highest name first), and where `go install` puts binaries.
func promtoolDirs() []string {
	dirs := []string{"/usr/bin", "/usr/local/bin", "/opt/prometheus", "/opt/prometheus/bin"}
	m, _ := filepath.Glob("/opt/prometheus-*")
	slices.Sort(m)
	slices.Reverse(m)
	dirs = append(dirs, m...)
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range filepath.SplitList(os.Getenv("GOPATH")) {
		if d != "" {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}

// checkPromtool runs `promtool --version` and returns its first line, e.g. "promtool, version
// 2.42.0+ds (branch: debian/sid, revision: 2.42.0+ds-5+b6)".
func checkPromtool(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("promtool --version: %w\n%s", err, tail(string(out)))
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line, nil
}

// installPromtool runs apt-get install -y --no-install-recommends prometheus (after apt-get update if
// the first try fails) when this process is root and has apt-get, one test binary at a time: it
// shares the PostgreSQL install's lock (aptInstall), since dpkg runs one install at a time anyway.
// The package's recommendation, prometheus-node-exporter, is left out: promtool needs nothing of
// it. It returns why promtool could not be installed, or "".
func installPromtool() string {
	return aptGetInstall("prometheus", func() bool { return findPromtool() != "" })
}
