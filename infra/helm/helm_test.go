// Package helm holds the proofs of the Helm chart in sluice/: helm lint and helm template with
// default and non-default values, the rendered objects decoded strictly into Kubernetes API
// types, and checks that what the chart runs is what the sluice binary accepts and serves.
// The tests run helm v4 (HelmVersion), found through $SLUICE_TEST_HELM, which `make test` sets
// after building bin/helm-<version>; without one they fail, never skip.
package helm

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// HelmVersion is the helm release the tests run. The Makefile pins the same one.
const HelmVersion = "v4.3.2"

// EnvHelm names the variable pointing the tests at a helm binary built from HelmVersion.
const EnvHelm = "SLUICE_TEST_HELM"

const helmModule = "helm.sh/helm/v4"

// chartDir is the chart, relative to this package.
const chartDir = "sluice"

// helmBinary returns the path of a helm binary built from HelmVersion: $SLUICE_TEST_HELM, else
// the Makefile's bin/helm-<version> when it was built. Otherwise the test fails with what to do.
func helmBinary(t testing.TB) string {
	t.Helper()
	path := os.Getenv(EnvHelm)
	from := "$" + EnvHelm
	if path == "" {
		path = filepath.Join("..", "..", "bin", "helm-"+HelmVersion)
		from = "the Makefile's build"
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			t.Fatalf("no helm for the chart tests: %s is not set and %s does not exist; run `make test` "+
				"(it builds bin/helm-%s with go install %s/cmd/helm@%s) or set %s to a helm %s binary",
				EnvHelm, path, HelmVersion, helmModule, HelmVersion, EnvHelm, HelmVersion)
		}
	}
	if err := checkHelm(path); err != nil {
		t.Fatalf("helm from %s (%s): %v", from, path, err)
	}
	return path
}

// checkHelm checks that path is a helm binary built from HelmVersion (its build information).
func checkHelm(path string) error {
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	if bi.Main.Path != helmModule || bi.Main.Version != HelmVersion {
		return fmt.Errorf("built from %s %s, want %s %s", bi.Main.Path, bi.Main.Version, helmModule, HelmVersion)
	}
	return nil
}

// runHelm runs helm with args in a scratch home (no user repositories, plugins or kubeconfig:
// everything here is offline) and returns its standard output, or its error with the output.
func runHelm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"), "KUBECONFIG="+filepath.Join(home, "kubeconfig"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func TestHelmRefusesAHelmOfAnotherVersion(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := checkHelm(self); err == nil || !strings.Contains(err.Error(), helmModule) {
		t.Fatalf("checkHelm(test binary) = %v, want an error naming %s", err, helmModule)
	}
}
