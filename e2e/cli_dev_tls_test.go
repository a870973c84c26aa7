package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestDevTLS: `sluice dev --tls` is the whole TLS path in one command.
// The endpoint and every broker are https://, the saved profiles trust the
// CA it made, and the CLI works with them as it does in plaintext: topics,
// produce, consume (a consumer group too: its coordinator is reached
// over TLS), a new tenant signed up from the default profile's endpoint
// and CA. A cleartext client is told to use https://.
func TestDevTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	dev := startDev(t, dataDir, cfgPath, addr, "--tls")
	out := dev.out.String()
	require.Contains(t, out, "https://"+addr)
	require.Regexp(t, `brokers\s+https://127\.0\.0\.1:\d+ https://127\.0\.0\.1:\d+ https://127\.0\.0\.1:\d+\n`, out)
	cfg, err := os.ReadFile(cfgPath)
	require.NoError(t, err)
	require.Contains(t, string(cfg), `"ca_file": "`+filepath.Join(dataDir, "tls", "ca.crt")+`"`)

	mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "events", "-p", "3")
	mustCLI(t, cfgPath, "--profile", "dev", "produce", "events", "--key", "k", "--value", "over-tls")
	require.Equal(t, "over-tls\n", mustCLI(t, cfgPath, "--profile", "dev", "consume", "events"))
	require.Equal(t, "over-tls\n", mustCLI(t, cfgPath, "--profile", "dev", "consume", "events", "--group", "g", "-n", "1"))

	// A new profile takes the default profile's endpoint and CA.
	mustCLI(t, cfgPath, "--profile", "beta", "signup", "--email", "ops@beta.example", "--tenant", "beta")
	mustCLI(t, cfgPath, "--profile", "beta", "topic", "list")

	_, errOut, code := cli(t, cfgPath, "--profile", "dev", "--endpoint", "http://"+addr, "topic", "list")
	require.NotZero(t, code)
	require.Contains(t, errOut, "use an https:// endpoint")
}
