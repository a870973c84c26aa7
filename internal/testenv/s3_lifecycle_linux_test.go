package testenv

import (
	"bufio"
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
)

// TestHelperS3Child is the body of the child process that TestS3KilledTestBinaryLeavesNoServer kills.
func TestHelperS3Child(t *testing.T) {
	if os.Getenv("SLUICE_TESTENV_S3_CHILD") != "1" {
		return // only meaningful in a child started by the test below
	}
	s := S3(t)
	fmt.Printf("READY %d %s\n", s.proc.cmd.Process.Pid, s.root)
	time.Sleep(2 * time.Minute) // fault: the child lives until the parent kills it
	t.Fatal("parent never killed the child")
}

func TestS3KilledTestBinaryLeavesNoServer(t *testing.T) {
	t.Parallel()
	S3(t) // build versitygw here, not in the child, so the child's start is quick
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperS3Child$", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "SLUICE_TESTENV_S3_CHILD=1", EnvVersitygw+"="+versitygwPath)
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
			t.Fatalf("child ended without a server; stderr:\n%s", stderr.String())
		}
		line = l
	case <-time.After(2 * time.Minute):
		t.Fatal("child did not start a server within 2 minutes")
	}
	pidText, root, _ := strings.Cut(line, " ")
	pid, err := strconv.Atoi(pidText)
	if err != nil || !processAlive(pid) {
		t.Fatalf("bad READY line %q, or versitygw not running", line)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(15 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("versitygw %d outlived the killed test binary", pid)
		}
		time.Sleep(20 * time.Millisecond) // poll: until the processes are gone
	}
	// Nothing could remove the data after kill -9; the next server's sweep does (perhaps one in
	// another test binary, already).
	if _, err := os.Stat(filepath.Join(root, ownerFile)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	sweepStaleS3()
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("sweep left %s: %v", root, err)
	}
}
