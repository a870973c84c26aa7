package testenv

// Tests of the throwaway cluster's process lifecycle: they kill a test binary and look in /proc.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestHelperChild is the body of the child process that the lifecycle tests start and kill.
func TestHelperChild(t *testing.T) {
	if os.Getenv("SLUICE_TESTENV_CHILD") != "1" {
		return // only meaningful in a child started by startChildBinary
	}
	PostgresURL(t)
	c := resolved.cluster
	fmt.Printf("READY %d %s\n", c.proc.cmd.Process.Pid, c.root)
	time.Sleep(2 * time.Minute) // fault: the child lives until the parent kills it
	t.Fatal("parent never killed the child")
}

// startChildBinary runs this test binary's TestHelperChild and returns once its cluster is up.
func startChildBinary(t *testing.T) (cmd *exec.Cmd, postmaster int, root string) {
	t.Helper()
	if os.Getenv(EnvDatabaseURL) != "" {
		t.Skip("tests the throwaway cluster, which is not used when " + EnvDatabaseURL + " is set")
	}
	cmd = exec.Command(os.Args[0], "-test.run=^TestHelperChild$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "SLUICE_TESTENV_CHILD=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- line
				break
			}
		}
		close(ready)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var line string
	select {
	case l, ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("child ended without a cluster; stderr:\n%s", stderr.String())
		}
		line = l
	case <-time.After(2 * time.Minute):
		t.Fatal("child did not start a cluster within 2 minutes")
	}
	pidText, dir, _ := strings.Cut(line, " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil {
		t.Fatalf("bad READY line %q", line)
	}
	return cmd, pid, dir
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	var kids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		b, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:])) // state ppid ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			k, _ := strconv.Atoi(filepath.Base(filepath.Dir(s)))
			kids = append(kids, k)
		}
	}
	return kids
}

func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var alive []int
		for _, p := range pids {
			if processAlive(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("postgres processes %v outlived the test binary", alive)
		}
		time.Sleep(20 * time.Millisecond) // poll: until the processes are gone
	}
}

func TestKilledTestBinaryLeavesNoPostgres(t *testing.T) {
	cmd, pm, root := startChildBinary(t)
	pids := append([]int{pm}, childrenOf(pm)...)
	if len(pids) < 3 {
		t.Fatalf("expected a postmaster with auxiliary processes, got %v", pids)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pids)
	// Nothing could clean up after kill -9; the next binary's sweep does, including the System V
	// shared memory segment that postgres removes only on a clean shutdown.
	pidFile := postmasterPIDFile(filepath.Join(root, "data"))
	if len(pidFile) < 7 {
		t.Fatalf("expected %s with its postmaster.pid to be left behind by a killed binary", root)
	}
	shmID, err := strconv.Atoi(strings.Fields(pidFile[6])[1])
	if err != nil {
		t.Fatalf("postmaster.pid shmem line %q: %v", pidFile[6], err)
	}
	key, err := shmKey(shmID)
	if err != nil {
		t.Fatalf("shared memory segment %d of the killed cluster: %v", shmID, err)
	}
	sweepStale(filepath.Dir(root))
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("sweep left %s: %v", root, err)
	}
	if after, err := shmKey(shmID); err == nil && after == key {
		t.Fatalf("sweep left shared memory segment %d (key %#x)", shmID, key)
	}
}

func TestSIGTERMStopsClusterAndRemovesItsDirectory(t *testing.T) {
	cmd, pm, root := startChildBinary(t)
	pids := append([]int{pm}, childrenOf(pm)...)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("child should have died of SIGTERM, got %v", err)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("child exit: %v, want death by SIGTERM", err)
	}
	waitGone(t, pids)
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s should have been removed on SIGTERM: %v", root, err)
	}
}

// shmKey returns the key of System V shared memory segment id.
func shmKey(id int) (int32, error) {
	var d unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &d); err != nil {
		return 0, err
	}
	return d.Perm.Key, nil
}
