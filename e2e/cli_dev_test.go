package e2e

import (
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
)

// TestE2EMakeDev: `make dev ARGS='…'` passes the flags to sluice dev, and
// Ctrl-C (SIGINT to the terminal's process group: make and sluice dev)
// stops it cleanly: sluice dev exits 0, so make reports no error (with go
// run it printed "Error 1": go run exits 1 whenever it is interrupted).
func TestE2EMakeDev(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	dir := t.TempDir()
	dataDir, cfgPath, addr := filepath.Join(dir, "data"), filepath.Join(dir, "cli", "config.json"), testcluster.FreeAddr(t)
	repo, err := filepath.Abs("..")
	require.NoError(t, err)
	cmd := exec.Command("make", "-C", repo, "BIN="+filepath.Join(dir, "bin"), "dev",
		"ARGS=--data-dir "+dataDir+" --listen-addr "+addr+" --cli-config "+cfgPath)
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
	testcluster.Wait(t, 5*time.Minute, "make dev to build and start", func() error {
		select {
		case err := <-exited:
			return testcluster.Permanent(errors.Join(errors.New("make dev exited"), err))
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
