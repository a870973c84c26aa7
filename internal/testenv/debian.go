//go:build unix

package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

// aptGetInstall runs apt-get install -y --no-install-recommends pkg
// (after apt-get update if the first try fails) when this process is root
// and has apt-get, one test binary at a time: it shares the PostgreSQL
// install's lock (aptInstall), since dpkg runs one install at a time
// anyway. found says whether another test binary installed it while this
// one waited for the lock. It returns why pkg could not be installed, or
// "".
func aptGetInstall(pkg string, found func() bool) string {
	if os.Geteuid() != 0 {
		return "not running as root, so apt-get install -y " + pkg + " was not tried"
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return "no apt-get to install the Debian package " + pkg + " with"
	}
	if unlock, err := lockFile(filepath.Join(os.TempDir(), dirPrefix+"apt.lock"), syscall.LOCK_EX); err == nil {
		defer unlock()
	}
	if found() {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), aptTimeout)
	defer cancel()
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	install := []string{"install", "-y", "--no-install-recommends", pkg}
	if _, err := run(install...); err == nil {
		return ""
	}
	if out, err := run("update"); err != nil {
		return fmt.Sprintf("apt-get update failed (%v):\n%s", err, tail(out))
	}
	if out, err := run(install...); err != nil {
		return fmt.Sprintf("apt-get install -y --no-install-recommends %s failed (%v):\n%s", pkg, err, tail(out))
	}
	return ""
}

var debianTools sync.Map // command name → *debianTool

type debianTool struct {
	once sync.Once
	path string
	err  error
}

// DebianTool returns the path of command name (curl, tshark, tcpdump, kcat) for a
// test that runs it as a user would: from PATH, or, when missing,
// installed once per test binary from the Debian package pkg
// (aptGetInstall: as root, under the install lock). When it cannot be had
// the test fails with the reason and what to install; it never skips.
func DebianTool(t testing.TB, name, pkg string) string {
	t.Helper()
	v, _ := debianTools.LoadOrStore(name, &debianTool{})
	d := v.(*debianTool)
	d.once.Do(func() {
		look := func() string {
			if p, err := exec.LookPath(name); err == nil {
				return p
			}
			return ""
		}
		if d.path = look(); d.path != "" {
			return
		}
		why := aptGetInstall(pkg, func() bool { return look() != "" })
		if d.path = look(); d.path == "" {
			if why == "" {
				why = "apt-get install succeeded but " + name + " is still not on PATH"
			}
			d.err = fmt.Errorf("testenv: no %s on PATH; %s. Install the Debian package %s (apt-get install %s)", name, why, pkg, pkg)
			return
		}
		t.Logf("testenv: installed %s (Debian package %s)", d.path, pkg)
	})
	if d.err != nil {
		t.Fatal(d.err)
	}
	return d.path
}
