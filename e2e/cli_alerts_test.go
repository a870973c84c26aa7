package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane/alerting"
	"github.com/sluicemq/sluice/internal/testcluster"
)

// TestCLIAlerts drives `sluice alerts` and `sluice webhook` against
// `sluice dev`: an empty alert list, the policy, a webhook created (its
// secret printed once), tested against a receiver that verifies the
// signature with that secret, listed, its delivery log, deleted; and bad
// input.
func TestCLIAlerts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	startDev(t, dataDir, cfgPath, addr)
	dev := func(args ...string) []string { return append([]string{"--profile", "dev"}, args...) }

	out := mustCLI(t, cfgPath, dev("alerts", "list")...)
	require.NotContains(t, out, "retention-expiry-risk")
	out = mustCLI(t, cfgPath, dev("alerts", "policy")...)
	require.Contains(t, out, "expiry risk threshold: 1d")
	mustCLI(t, cfgPath, dev("alerts", "policy", "set", "--expiry-risk-threshold", "48h")...)
	require.Contains(t, mustCLI(t, cfgPath, dev("alerts", "policy")...), "expiry risk threshold: 2d")

	var (
		mu       sync.Mutex
		secret   []byte
		verified int
		refused  []string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := alerting.Verify(secret, r.Header, body, time.Now(), 5*time.Minute); err != nil {
			refused = append(refused, err.Error())
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		verified++
	}))
	defer recv.Close()

	out = mustCLI(t, cfgPath, dev("webhook", "create", recv.URL+"/hook", "--description", "e2e")...)
	id := regexp.MustCompile(`(?m)^id:\s+(\S+)`).FindStringSubmatch(out)
	sec := regexp.MustCompile(`(?m)^signing secret:\s+(\S+)`).FindStringSubmatch(out)
	require.Len(t, id, 2, out)
	require.Len(t, sec, 2, out)
	require.Contains(t, out, "shown only once")
	mu.Lock()
	secret = []byte(sec[1])
	mu.Unlock()

	list := mustCLI(t, cfgPath, dev("webhook", "list")...)
	require.Contains(t, list, id[1])
	require.NotContains(t, list, sec[1], "the secret is never shown again")

	out = mustCLI(t, cfgPath, dev("webhook", "test", id[1])...)
	require.Contains(t, out, "200")
	mu.Lock()
	require.Equal(t, 1, verified, "the test event was signed with the printed secret; refused: %v", refused)
	mu.Unlock()
	require.Contains(t, mustCLI(t, cfgPath, dev("webhook", "deliveries", id[1])...), "delivered")

	// Bad input and unknown ids: clear errors, scriptable exit codes.
	_, errOut, code := cli(t, cfgPath, dev("alerts", "describe", "01a228d7-0000-7000-8000-000000000000")...)
	require.Equal(t, 4, code, errOut)
	_, errOut, code = cli(t, cfgPath, dev("webhook", "create", "ftp://example.com/x")...)
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "https://")
	_, errOut, code = cli(t, cfgPath, dev("alerts", "policy", "set", "--expiry-risk-threshold", "5s")...)
	require.Equal(t, 2, code, errOut)

	mustCLI(t, cfgPath, dev("webhook", "delete", id[1])...)
	require.NotContains(t, mustCLI(t, cfgPath, dev("webhook", "list")...), id[1])
	_, errOut, code = cli(t, cfgPath, dev("webhook", "delete", id[1])...)
	require.Equal(t, 4, code, errOut)
}
