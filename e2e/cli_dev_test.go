package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicemq/sluice/internal/testcluster"
	"github.com/sluicemq/sluice/internal/testenv"
)

// TestDevMake: `make dev ARGS='…'` passes the flags to sluice dev, and
// Ctrl-C (SIGINT to the terminal's process group: make and sluice dev)
// stops it cleanly: sluice dev exits 0, so make reports no error (with go
// run it printed "Error 1": go run exits 1 whenever it is interrupted).
func TestDevMake(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	cmd := exec.Command("make", "-C", repo, "BIN="+filepath.Join(dir, "bin"), "dev",
		"ARGS=--data-dir "+dataDir+" --listen-addr "+addr+" --kafka-addr 127.0.0.1:0 --cli-config "+cfgPath)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=", "MAKEFLAGS=")
	// Its own process group, as a terminal's foreground job, so that the
	// test can interrupt the group as Ctrl-C does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	pgid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		if t.Failed() {
			t.Logf("make dev output:\n%s", out.String())
		}
	})
	testenv.Wait(t, 5*time.Minute, "make dev to build and start", func() error {
		select {
		case err := <-exited:
			return testenv.Permanent(errors.Join(errors.New("make dev exited"), err))
		default:
		}
		if !strings.Contains(out.String(), "Sluice dev is running") {
			return errors.New("no banner yet")
		}
		return nil
	})
	require.Contains(t, out.String(), "http://"+addr, "ARGS reached sluice dev (--listen-addr)")
	_, err = os.Stat(filepath.Join(dataDir, "controlplane.db"))
	require.NoError(t, err, "ARGS reached sluice dev (--data-dir)")
	_, err = os.Stat(cfgPath)
	require.NoError(t, err, "ARGS reached sluice dev (--cli-config)")

	require.NoError(t, syscall.Kill(-pgid, syscall.SIGINT))
	select {
	case err = <-exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("make dev did not stop after SIGINT")
	}
	// make itself dies of the SIGINT it got too (as it does for any
	// recipe), after its recipe ended: it reports no error of the recipe.
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee)
		ws := ee.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGINT, "make exited with %v", err)
	}
	require.NotContains(t, out.String(), "Error", "make reports no failed recipe")
	require.NotContains(t, out.String(), "level=ERROR")
}

// TestDevSummaryAndStop: sluice dev's start-up output is short (under
// 20 lines at the default level: its banner scrolled away under 49 lines
// of partition logs) and ends with the summary of brokers and metrics
// endpoints, also once start-up is over (groups work); SIGTERM and SIGINT
// stop it with exit 0; after a restart too; -o json prints the summary as
// one object.
func TestDevSummaryAndStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	start := func(extra ...string) (*exec.Cmd, *syncBuffer, *syncBuffer, chan error) {
		cmd := exec.Command(plainBin, append([]string{"dev", "--data-dir", dataDir, "--listen-addr", addr, "--kafka-addr", "127.0.0.1:0", "--cli-config", cfgPath}, extra...)...)
		stdout, stderr := &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.Env = append(os.Environ(), "SLUICE_PROFILE=", "SLUICE_ENDPOINT=", "SLUICE_API_KEY=", "SLUICE_LOG_LEVEL=", "SLUICE_OUTPUT=")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			if t.Failed() {
				t.Logf("sluice dev stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			}
		})
		return cmd, stdout, stderr, exited
	}
	stop := func(cmd *exec.Cmd, exited chan error, sig syscall.Signal) {
		t.Helper()
		require.NoError(t, cmd.Process.Signal(sig))
		select {
		case err := <-exited:
			require.NoError(t, err, "sluice dev exits 0 on %v", sig)
		case <-time.After(time.Minute):
			t.Fatalf("sluice dev did not stop on %v", sig)
		}
	}
	waitFor := func(buf *syncBuffer, s string) {
		t.Helper()
		// sluice dev waits up to 30 s for its brokers and up to 30 s more
		// for groups and transactions before its summary, after start-up:
		// on a loaded machine (make test-busy) a restart once took over a
		// minute.
		testenv.Wait(t, 2*time.Minute, "sluice dev to print "+s, func() error {
			if !strings.Contains(buf.String(), s) {
				return errors.New("not yet")
			}
			return nil
		})
	}

	cmd, stdout, stderr, exited := start()
	waitFor(stdout, "Stop with Ctrl-C")
	// Start-up is over when groups work; nothing was logged after the
	// summary, which stays the last thing on the screen.
	mustCLI(t, cfgPath, "--profile", "dev", "group", "list")
	all := stderr.String() + stdout.String() // stderr holds only what came before (none of it after the summary)
	lines := strings.Split(strings.TrimSuffix(all, "\n"), "\n")
	// The summary is 24 lines (with the Kafka client config); start-up
	// logs nothing beyond it.
	require.LessOrEqual(t, len(lines), 24, "start-up output:\n%s", all)
	require.True(t, strings.HasSuffix(stdout.String(), "Stop with Ctrl-C; state stays in "+dataDir+".\n"), stdout.String())
	require.Empty(t, strings.TrimSpace(stderr.String()), "no log line at info level during start-up")
	for _, want := range []string{"brokers ", "/metrics (control plane)", "/metrics (broker 1)", "/metrics (broker 2)", "/metrics (broker 3)"} {
		require.Contains(t, stdout.String(), want)
	}
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(l, "Try:") || strings.HasPrefix(l, "Stop") {
			require.NotContains(t, l, "  ", "no double spaces in sentences")
		}
	}
	stop(cmd, exited, syscall.SIGTERM)
	require.Contains(t, stdout.String(), "Sluice dev stopped")
	require.NotContains(t, stderr.String(), "level=WARN", "a clean stop warns of nothing")
	require.NotContains(t, stderr.String(), "level=ERROR")

	// Again on the same data dir, with -o json, stopped with SIGINT.
	cmd, stdout, _, exited = start("-o", "json")
	waitFor(stdout, "\n")
	var sum struct {
		Endpoint string `json:"endpoint"`
		Brokers  []struct {
			ID         int32  `json:"id"`
			Address    string `json:"address"`
			MetricsURL string `json:"metricsUrl"`
		} `json:"brokers"`
		ControlPlaneMetricsURL string `json:"controlPlaneMetricsUrl"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout.String()), &sum), stdout.String())
	require.Equal(t, "http://"+addr, sum.Endpoint)
	require.Len(t, sum.Brokers, 3)
	for _, b := range sum.Brokers {
		require.NotEmpty(t, b.Address)
		require.True(t, strings.HasSuffix(b.MetricsURL, "/metrics"), b.MetricsURL)
	}
	mustCLI(t, cfgPath, "--profile", "dev", "group", "list")
	stop(cmd, exited, syscall.SIGINT)
}
