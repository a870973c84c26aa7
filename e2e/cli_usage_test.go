package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// devOperator starts sluice dev (with extra flags) and returns the CLI config, the endpoint
// and the operator credential (from --data-dir's secrets.json).
func devOperator(t *testing.T, extra ...string) (cfgPath, endpoint, token string) {
	t.Helper()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr, extra...)
	b, err := os.ReadFile(filepath.Join(dataDir, "secrets.json"))
	require.NoError(t, err)
	var secrets struct {
		OperatorToken string `json:"operator_token"`
	}
	require.NoError(t, json.Unmarshal(b, &secrets))
	require.NotEmpty(t, secrets.OperatorToken)
	return cfgPath, "http://" + addr, secrets.OperatorToken
}

// TestE2ECLIOperatorLimits: the operator changes a tenant's limit
// overrides with sluice operator tenant update (by the tenant's name, no
// API key); the tenant sees them in tenant get next to what it uses; the
// control plane enforces the new topic limit; clearing one override brings
// the plan's value back and keeps the others. With sluice dev's real
// processes.
func TestE2ECLIOperatorLimits(t *testing.T) {
	cfgPath, endpoint, token := devOperator(t)
	mustCLI(t, cfgPath, "--profile", "acme", "--endpoint", endpoint, "signup", "--email", "ops@acme.example", "--tenant", "acme")
	op := []string{"--endpoint", endpoint, "--operator-token", token}

	out := mustCLI(t, cfgPath, append([]string{"operator", "tenant", "update", "acme", "--max-topics", "2", "--max-groups", "3",
		"--max-transactional-ids", "4", "--producer-ids-per-hour", "50", "--produce-bytes-per-sec", "1MiB", "--max-total-storage-bytes", "2GiB"}, op...)...)
	require.Regexp(t, `max-topics:\s+2 \(override\)\n`, out)
	require.Regexp(t, `produce-bytes-per-sec:\s+1048576 \(override\)\n`, out)
	require.Regexp(t, `max-partitions:\s+30\n`, out, "the plan's, no override")

	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "one", "-p", "2")
	out = mustCLI(t, cfgPath, "--profile", "acme", "tenant", "get")
	for _, re := range []string{
		`topics:\s+1 of 2\n`,
		`partitions:\s+2 of 30\n`,
		`groups:\s+0 of 3\n`,
		`transactional ids:\s+0 of 4\n`,
		`storage:\s+\S+ \S+ of 2\.00 GiB \(hot \S+ \S+, cold \S+ \S+\)\n`,
		`produce:\s+\S+ \S+/s of 1\.00 MiB/s\n`,
		`new producer ids:\s+\S+/hour of 50/hour\n`,
	} {
		require.Regexp(t, re, out)
	}
	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "two", "-p", "1")
	_, errOut, code := cli(t, cfgPath, "--profile", "acme", "topic", "create", "three", "-p", "1")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "resource_exhausted")

	// The overrides listed, then one cleared: the others stay.
	out = mustCLI(t, cfgPath, append([]string{"operator", "tenant", "list"}, op...)...)
	require.Regexp(t, `acme\s+free\s+active\s+.*max-topics=2,.*max-groups=3`, out)
	var upd struct {
		Tenant struct {
			Limits struct {
				MaxTopics int `json:"maxTopics"`
				MaxGroups int `json:"maxGroups"`
			} `json:"limits"`
			Overrides map[string]any `json:"overrides"`
		} `json:"tenant"`
	}
	out = mustCLI(t, cfgPath, append([]string{"operator", "tenant", "update", "acme", "--clear-override", "max-topics", "-o", "json"}, op...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &upd), out)
	require.Equal(t, 10, upd.Tenant.Limits.MaxTopics, "the free plan's")
	require.Equal(t, 3, upd.Tenant.Limits.MaxGroups)
	require.NotContains(t, upd.Tenant.Overrides, "maxTopics")
	mustCLI(t, cfgPath, "--profile", "acme", "topic", "create", "three", "-p", "1")

	// A tenant's API key is no operator credential.
	_, errOut, code = cli(t, cfgPath, "operator", "tenant", "list", "--endpoint", endpoint, "--operator-token", "slk_not_the_operator")
	require.Equal(t, 3, code, errOut)
}
