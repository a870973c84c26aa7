package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestCLIOperatorTransactions: two tenants each commit a transaction
// under the same transactional id; sluice txn list --all (the operator
// credential, no API key) shows both, describe --tenant each one, while
// each tenant's own txn list shows only its own; a tenant's API key as the
// operator credential is refused (exit 3). With sluice dev's real
// processes.
func TestCLIOperatorTransactions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	b, err := os.ReadFile(filepath.Join(dataDir, "secrets.json"))
	require.NoError(t, err)
	var secrets struct {
		OperatorToken string `json:"operator_token"`
		APIKey        string `json:"api_key"`
	}
	require.NoError(t, json.Unmarshal(b, &secrets))
	require.NotEmpty(t, secrets.OperatorToken)

	tenantID := func(profile string) string {
		var tn struct {
			Tenant struct {
				ID string `json:"id"`
			} `json:"tenant"`
		}
		require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, "--profile", profile, "tenant", "get", "-o", "json")), &tn))
		require.NotEmpty(t, tn.Tenant.ID)
		return tn.Tenant.ID
	}
	mustCLI(t, cfgPath, "--profile", "acme", "--endpoint", "http://"+addr, "signup", "--email", "ops@acme.example", "--tenant", "acme")
	dev, acme := tenantID("dev"), tenantID("acme")
	for _, p := range []string{"dev", "acme"} {
		mustCLI(t, cfgPath, "--profile", p, "topic", "create", "ledger", "-p", "1")
		_, errOut, code := cliIn(t, cfgPath, "a\nb\n", "--profile", p, "produce", "ledger", "--transactional-id", "import-1", "--quiet")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, errOut, "in a transaction: committed")
	}
	mustCLIIn(t, cfgPath, "c\n", "--profile", "acme", "produce", "ledger", "--transactional-id", "acme-only", "--quiet")

	// Each tenant sees its own ids only.
	out := mustCLI(t, cfgPath, "--profile", "dev", "txn", "list")
	require.Regexp(t, `import-1\s+CompleteCommit`, out)
	require.NotContains(t, out, "acme-only")
	out = mustCLI(t, cfgPath, "--profile", "acme", "txn", "list")
	require.Regexp(t, `import-1\s+CompleteCommit`, out)
	require.Regexp(t, `acme-only\s+CompleteCommit`, out)

	// The operator sees both tenants', with no API key at all.
	op := []string{"--endpoint", "http://" + addr, "--operator-token", secrets.OperatorToken}
	out = mustCLI(t, cfgPath, append([]string{"txn", "list", "--all"}, op...)...)
	require.Regexp(t, `(?m)^TENANT\s+TRANSACTIONAL-ID\s+STATE`, out)
	require.Regexp(t, `(?m)^`+dev+`\s+import-1\s+CompleteCommit`, out)
	require.Regexp(t, `(?m)^`+acme+`\s+import-1\s+CompleteCommit`, out)
	require.Regexp(t, `(?m)^`+acme+`\s+acme-only\s+CompleteCommit`, out)
	require.Len(t, regexp.MustCompile(`(?m)^[0-9a-f-]{36}\s`).FindAllString(out, -1), 3)

	var list struct {
		Transactions []struct {
			TenantID        string `json:"tenantId"`
			TransactionalID string `json:"transactionalId"`
		} `json:"transactions"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, append([]string{"txn", "list", "--tenant", acme, "-o", "json"}, op...)...)), &list))
	require.Len(t, list.Transactions, 2)
	for _, tx := range list.Transactions {
		require.Equal(t, acme, tx.TenantID)
	}

	var desc struct {
		Transaction struct {
			TenantID        string `json:"tenantId"`
			TransactionalID string `json:"transactionalId"`
			State           string `json:"state"`
		} `json:"transaction"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, cfgPath, append([]string{"txn", "describe", "import-1", "--tenant", dev, "-o", "json"}, op...)...)), &desc))
	require.Equal(t, dev, desc.Transaction.TenantID)
	require.Equal(t, "TXN_STATE_COMPLETE_COMMIT", desc.Transaction.State)
	out = mustCLI(t, cfgPath, append([]string{"txn", "describe", "acme-only", "--tenant", acme}, op...)...)
	require.Regexp(t, `tenant:\s+`+acme, out)
	_, errOut, code := cli(t, cfgPath, append([]string{"txn", "describe", "acme-only", "--tenant", dev}, op...)...)
	require.Equal(t, 4, code, errOut)

	// A tenant's credential is not the operator's.
	_, errOut, code = cli(t, cfgPath, "--endpoint", "http://"+addr, "txn", "list", "--all", "--operator-token", secrets.APIKey)
	require.Equal(t, 3, code, errOut)
	require.Contains(t, errOut, "invalid operator credential")
}
