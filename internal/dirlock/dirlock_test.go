//go:build unix

package dirlock

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// holdEnv makes the test binary a lock holder (see TestMain).
const holdEnv = "DIRLOCK_TEST_HOLD"

// TestMain: with $DIRLOCK_TEST_HOLD set, the binary locks that dir, says
// so on stdout and waits to be killed, as a server holding its data dir.
func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		if _, err := Acquire(dir); err != nil {
			os.Stdout.WriteString("error: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("locked\n")
		select {}
	}
	os.Exit(m.Run())
}

func TestDirLockSecondHolderRefusedUntilRelease(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	first, err := Acquire(dir)
	require.NoError(t, err)
	pid, err := os.ReadFile(filepath.Join(dir, FileName))
	require.NoError(t, err)
	require.Equal(t, []byte(itoa(os.Getpid())+"\n"), pid)

	_, err = Acquire(dir)
	var held *HeldError
	require.True(t, errors.As(err, &held), "%v", err)
	require.Equal(t, os.Getpid(), held.PID)
	require.Equal(t, dir, held.Dir)
	require.ErrorContains(t, err, "pid "+itoa(os.Getpid()))

	require.NoError(t, first.Release())
	require.NoError(t, first.Release(), "a second release is harmless")
	second, err := Acquire(dir)
	require.NoError(t, err)
	require.NoError(t, second.Release())
}

// TestDirLockHeldByAnotherProcessFreedByKill: another process's lock
// refuses this one with that process's pid, and SIGKILL frees it.
func TestDirLockHeldByAnotherProcessFreedByKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = Acquire(dir)
	var held *HeldError
	require.True(t, errors.As(err, &held), "%v", err)
	require.Equal(t, cmd.Process.Pid, held.PID)

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	l, err := Acquire(dir)
	require.NoError(t, err, "a killed holder leaves no stale lock")
	require.NoError(t, l.Release())
}

func itoa(n int) string { return strconv.Itoa(n) }
