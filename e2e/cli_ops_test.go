package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestDevOperatorListeners: `sluice dev` prints each process's
// operator listener, on loopback; they serve the metrics, labelled with
// tenants, and the probes, while the endpoint and the brokers' client
// ports, which tenants reach, answer no metric.
func TestDevOperatorListeners(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	dev := startDev(t, dataDir, cfgPath, addr)
	banner := dev.out.String()

	listeners := map[string]string{} // "control plane", "broker 1" … → host:port
	for _, m := range regexp.MustCompile(`http://(\S+)/metrics \((control plane|broker \d)\)`).FindAllStringSubmatch(banner, -1) {
		listeners[m[2]] = m[1]
	}
	require.Len(t, listeners, 4, "the banner names the control plane's and 3 brokers' metrics:\n%s", banner)
	for name, a := range listeners {
		host, _, err := net.SplitHostPort(a)
		require.NoError(t, err)
		require.True(t, net.ParseIP(host).IsLoopback(), "%s's operator listener %s is loopback only", name, a)
	}
	tenantID := regexp.MustCompile(`tenant id\s+(\S+)`).FindStringSubmatch(banner)
	require.NotNil(t, tenantID, banner)
	brokers := regexp.MustCompile(`brokers\s+(.+)`).FindStringSubmatch(banner)
	require.NotNil(t, brokers, banner)

	mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "ledger", "-p", "1")
	mustCLI(t, cfgPath, "--profile", "dev", "produce", "ledger", "--value", "hello")

	scraper := &http.Client{Timeout: 10 * time.Second}
	get := func(url string) (int, string, error) {
		res, err := scraper.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	// Some broker leads the partition and counts the tenant's bytes.
	label := fmt.Sprintf(`sluice_broker_produced_bytes_total{tenant=%q}`, tenantID[1])
	testenv.Wait(t, 30*time.Second, "the tenant's bytes in a broker's metrics", func() error {
		for i := 1; i <= 3; i++ {
			_, body, err := get("http://" + listeners[fmt.Sprintf("broker %d", i)] + "/metrics")
			if err != nil {
				return err
			}
			if strings.Contains(body, label) {
				return nil
			}
		}
		return fmt.Errorf("no broker exports %s", label)
	})
	for name, a := range listeners {
		code, body, err := get("http://" + a + "/metrics")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, name)
		require.Contains(t, body, "sluice_", name)
		for _, path := range []string{"/healthz", "/readyz"} {
			code, _, err := get("http://" + a + path)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, "%s %s", name, path)
		}
	}

	tenantPorts := append([]string{addr}, strings.Fields(brokers[1])...)
	require.Len(t, tenantPorts, 4, banner)
	for _, a := range tenantPorts {
		code, body, err := get("http://" + a + "/metrics")
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "GET http://%s/metrics", a)
		require.NotContains(t, body, tenantID[1])
		require.NotContains(t, body, "sluice_")
	}
}

// TestDevOnePerDataDir: a second `sluice dev` on a data dir in use, on
// another port, exits at once, non-zero, naming the running one's pid,
// and changes nothing: the first keeps serving and the dev profile still
// points at it. So does a `sluice broker` on one of dev's broker folders.
// After kill -9 of the first, dev starts on that dir again.
func TestDevOnePerDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json")
	addr, addr2 := testcluster.FreeAddr(t), testcluster.FreeAddr(t)
	first := startDev(t, dataDir, cfgPath, addr)
	pid := fmt.Sprintf("pid %d", first.cmd.Process.Pid)

	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, plainBin, args...)
		cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=", "SLUICE_METRICS_ADDR=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, ctx.Err(), "it did not exit: %s", out)
		return string(out), err
	}
	out, err := run("dev", "--data-dir", dataDir, "--listen-addr", addr2, "--cli-config", cfgPath)
	require.Error(t, err, out)
	require.Equal(t, 1, exitCode(err), out)
	require.Contains(t, out, pid)
	require.Contains(t, out, "data dir "+dataDir+" is in use")
	require.NotContains(t, out, "Sluice dev is running")
	require.NotContains(t, out, "broker serving", "refused before it started any broker")

	out, err = run("broker", "--id", "9", "--data-dir", filepath.Join(dataDir, "broker-1"),
		"--listen-addr", testcluster.FreeAddr(t), "--metrics-addr", testcluster.FreeAddr(t),
		"--control-plane", "http://"+addr, "--broker-token", "e2e-broker-token-0123456789")
	require.Error(t, err, out)
	require.NotZero(t, exitCode(err), out)
	require.Contains(t, out, pid)
	require.NotContains(t, out, "broker serving")

	// The first is untouched.
	profile := func() string {
		b, err := os.ReadFile(cfgPath)
		require.NoError(t, err)
		var c struct {
			Profiles map[string]struct {
				Endpoint string `json:"endpoint"`
			} `json:"profiles"`
		}
		require.NoError(t, json.Unmarshal(b, &c))
		return c.Profiles["dev"].Endpoint
	}
	require.Equal(t, "http://"+addr, profile())
	mustCLI(t, cfgPath, "--profile", "dev", "topic", "create", "solo", "-p", "3")
	require.Regexp(t, `\s[123],[123],[123]\s`, mustCLI(t, cfgPath, "--profile", "dev", "topic", "describe", "solo"), "three replicas (in any order: placement rotates)")

	// kill -9 leaves no stale lock: dev starts again on the same dir.
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	_ = first.cmd.Wait()
	startDev(t, dataDir, cfgPath, addr2)
	require.Equal(t, "http://"+addr2, profile())
	require.Contains(t, mustCLI(t, cfgPath, "--profile", "dev", "topic", "describe", "solo"), "solo")
}
