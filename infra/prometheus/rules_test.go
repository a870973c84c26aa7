// Package prometheus_test checks the Prometheus alerting rules in this directory (alerts.yml) with
// promtool: `promtool check rules` for syntax and templates, `promtool test rules` for the
// scripted series in *_test.yml. promtool comes from testenv.Promtool, which installs the Debian
// package prometheus when it is missing; a missing promtool fails the tests, never skips them.
package prometheus_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testenv"
)

// rulesFile holds the rules; every *_test.yml beside it is a promtool unit-test file.
const rulesFile = "alerts.yml"

// builtIn are the alerts that mirror the control plane's built-in ones (DESIGN.md §8) under the
// same names; renaming one breaks users' routing, so it must be deliberate.
var builtIn = []string{"SluiceConsumerLagGrowing", "SluiceRetentionExpiryRisk", "SluiceRetentionExpired"}

func TestPrometheusRulesCheck(t *testing.T) {
	t.Parallel()
	promtool(t, "check", "rules", rulesFile)
}

func TestPrometheusRulesUnit(t *testing.T) {
	t.Parallel()
	promtool(t, append([]string{"test", "rules"}, testFiles(t)...)...)
}

// TestPrometheusRulesCovered checks that every alert in alerts.yml, and every built-in alert, has
// a test where it fires and one where it must not.
func TestPrometheusRulesCovered(t *testing.T) {
	t.Parallel()
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	var alerts []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)\s*$`).FindAllSubmatch(rules, -1) {
		alerts = append(alerts, string(m[1]))
	}
	for _, name := range builtIn {
		require.Contains(t, alerts, name, "%s has no rule for the built-in alert", rulesFile)
	}
	var tests strings.Builder
	for _, f := range testFiles(t) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		tests.Write(b)
	}
	for _, name := range alerts {
		q := regexp.QuoteMeta(name)
		fires := regexp.MustCompile(`alertname:\s*` + q + `\s*\n\s*exp_alerts:\s*\n\s*- exp_labels:`)
		silent := regexp.MustCompile(`alertname:\s*` + q + `\s*\n\s*exp_alerts:\s*\[\]`)
		require.Regexp(t, fires, tests.String(), "no test expects %s to fire", name)
		require.Regexp(t, silent, tests.String(), "no test expects %s to stay silent", name)
	}
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*_test.yml")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no promtool unit-test files (*_test.yml)")
	return files
}

// promtool runs promtool with args in this directory and fails the test with its output when it
// exits non-zero.
func promtool(t *testing.T, args ...string) {
	t.Helper()
	bin := testenv.Promtool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s (%s):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Millisecond), out)
}
