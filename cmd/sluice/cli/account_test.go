package cli

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/controlplane"
	"github.com/sluicemq/sluice/controlplane/clientlimit"
)

// TestCLISignupOverTheLimit: a signup refused by the control plane's
// per-address limit exits 1 and says, in words, how long to wait and until
// when; a taken name gets the single "already registered" answer (exit 5).
func TestCLISignupOverTheLimit(t *testing.T) {
	t.Parallel()
	cfg := controlplane.DefaultConfig()
	cfg.DatabaseURL = "sqlite:" + filepath.Join(t.TempDir(), "cp.db")
	cfg.ClientLimits.Signup = clientlimit.Limit{Burst: 2, Every: 90 * time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv, err := controlplane.New(t.Context(), cfg, controlplane.Deps{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx, ln, nil) }()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = srv.Close()
	})

	conf := filepath.Join(t.TempDir(), "config.json")
	signup := func(name string) (string, int) {
		var stdout, stderr bytes.Buffer
		code := Execute(t.Context(), []string{"--cli-config", conf, "--endpoint", "http://" + ln.Addr().String(), "--profile", name,
			"signup", "--force", "--email", "ops@" + name + ".example", "--tenant", name}, strings.NewReader(""), &stdout, &stderr)
		return stderr.String(), code
	}
	errOut, code := signup("acme")
	require.Equal(t, ExitOK, code, errOut)
	errOut, code = signup("acme")
	require.Equal(t, ExitExists, code, errOut)
	require.Contains(t, errOut, "tenant name or email is already registered")

	// The third signup from this address: over the limit of 2.
	errOut, code = signup("bravo")
	require.Equal(t, ExitError, code, errOut)
	require.Contains(t, errOut, "resource_exhausted: too many signups from this client address; retry in 1h")
	require.Contains(t, errOut, "sluice: the server asks to wait 1h", "the retry delay in words")
	require.Contains(t, errOut, ": retry after ", "and the time to retry at")
	t.Logf("sluice signup over the limit:\n%s", errOut)
}
